"""Security shared by the broker and the clients: principals, TLS contexts from Kafka's
``ssl.*`` properties, SASL mechanisms as sans-IO state machines (both sides), SCRAM
credentials, and the authorizer. Imports only ``rivulet.common`` and ``rivulet.protocol``,
so that the client, the server, the controller and Spark can all use it."""
