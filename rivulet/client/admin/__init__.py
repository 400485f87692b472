"""The admin clients: ``client.AsyncAdminClient`` and confluent-kafka's ``client.AdminClient``."""
