"""Batch bookkeeping shared by the gateway (which creates and cancels batches) and the batch
service (which runs them): the store and the Celery app."""
