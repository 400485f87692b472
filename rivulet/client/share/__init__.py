"""The share consumer (KIP-932): share sessions and acknowledgements (``session``, sans I/O),
ShareConsumeRequestManager (``fetcher``), ShareMembershipManager (``membership``) and
ShareConsumerImpl (``consumer.AIOShareConsumer``)."""
