"""The message broker connection used for every EVENT_QUEUE."""

BROKER_URL = "amqp://broker.internal"
