"""The consumer: SubscriptionState (``subscription``), the Fetcher, the classic groups'
assignors and ConsumerCoordinator, KIP-848's ConsumerMembership, and KafkaConsumer
(``consumer.AIOConsumer``)."""
