"""The ZooKeeper-era control plane: Kafka's znodes, broker registration, the controller."""
