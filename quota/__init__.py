"""Quotas: per-tenant request, token, cost and concurrency limits (``ferryman serve quota``)."""
