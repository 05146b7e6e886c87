"""Who is calling (``principals``, ``tokens``), what they may do (``acl``), and the one gRPC
interceptor that applies both to every RPC (``guard``). ``files`` reads the token and ACL files.

The pure parts (``acl``, ``tokens``, ``principals``) take text and mappings and return decisions;
only ``files`` touches the file system and only ``guard`` knows gRPC.
"""
