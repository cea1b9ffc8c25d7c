"""The resource truth: clusters, nodes, devices, topologies, flavors and resource classes."""
