"""The producer: partitioners, the RecordAccumulator, the sender and KafkaProducer
(``producer.AIOProducer``, with idempotence), and the TransactionManager (``transactions``)."""
