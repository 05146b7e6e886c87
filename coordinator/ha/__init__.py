"""High availability through ZooKeeper: election, fenced ZooKeeper store, its credentials, the elected office."""
