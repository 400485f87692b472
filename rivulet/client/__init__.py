"""Rivulet's Kafka client. Public names live in ``rivulet``, ``rivulet.aio`` and ``rivulet.admin``.

The modules follow the Java client's roles:

* connection: one broker connection (pipelined requests, version negotiation);
* client: NetworkClient and Metadata (connections per broker, cluster view, refreshes);
* config, errors, types: properties, KafkaError/KafkaException, TopicPartition/Message;
* partitioner, accumulator, producer: the partitioners, RecordAccumulator, Sender and
  KafkaProducer (with idempotence);
* subscription, fetcher, assignors, coordinator, membership, consumer: SubscriptionState,
  Fetcher, partition assignors, ConsumerCoordinator (classic groups), ConsumerMembership
  (KIP-848 groups) and KafkaConsumer;
* share_session, share_fetcher, share_membership, share_consumer: ShareSessionHandler and
  Acknowledgements, ShareConsumeRequestManager, ShareMembershipManager and ShareConsumerImpl;
* admin: the admin clients; sync: the blocking facade over the asyncio core.
"""
