"""The broker's Prometheus metrics (``metrics.listener``).

``requests`` is what the network layer records per request (cheap, on the event loop);
``collectors`` read the broker's state when scraped; ``telemetry`` turns KIP-714 client pushes
into metrics; ``exporter`` serves them over HTTP from a thread of its own. Nothing is imported
here, so that the network layer can import ``requests`` without pulling in the rest.
"""
