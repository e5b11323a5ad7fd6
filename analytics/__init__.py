"""Streaming analytics: clients subscribe to parameterised analytics over a pipeline's state
table, get a snapshot, then only what changed; identical subscriptions are shared."""

from .manager import Handle, QueryManager
from .registry import Analytic, AnalyticsError, Subscription, canonical, get, register, registered
from .server import QueryServer, serve

__all__ = ["Analytic", "AnalyticsError", "Handle", "QueryManager", "QueryServer", "Subscription",
           "canonical", "get", "register", "registered", "serve"]
