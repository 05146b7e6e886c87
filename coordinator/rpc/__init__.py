"""The gRPC layer: servicers, the server, and requests parsed before anything looks at them."""
