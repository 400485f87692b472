"""The asyncio client: the core the blocking ``rivulet.Producer``/``rivulet.Consumer`` run on.

    from rivulet.aio import AIOProducer, AIOConsumer, AIOAdminClient

    async with AIOProducer({"bootstrap.servers": "localhost:9092"}) as p:
        msg = await p.send_and_wait("topic", b"value", key=b"key")

    async with AIOConsumer({"bootstrap.servers": "localhost:9092", "group.id": "g"}) as c:
        c.subscribe(["topic"])
        async for msg in c:
            ...
"""

from rivulet.client.admin.client import AsyncAdminClient as AIOAdminClient
from rivulet.client.consumer.consumer import AIOConsumer, NoOffsetForPartitionError
from rivulet.client.errors import KafkaError, KafkaException
from rivulet.client.producer.producer import AIOProducer
from rivulet.client.share.consumer import AIOShareConsumer
from rivulet.common.types import AcknowledgeType
from rivulet.client.types import Message, TopicPartition

__all__ = ["AIOProducer", "AIOConsumer", "AIOShareConsumer", "AcknowledgeType", "AIOAdminClient", "Message", "TopicPartition", "KafkaError",
           "KafkaException", "NoOffsetForPartitionError"]
