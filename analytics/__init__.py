"""Streaming analytics: clients subscribe to parameterised analytics over a pipeline's state
table, get a snapshot, then only what changed; identical subscriptions are shared."""

from .manager import Handle, QueryManager
from .registry import (
    Analytic,
    AnalyticsError,
    Registry,
    Subscription,
    canonical,
    default_registry,
    get,
    register,
    registered,
)
from .server import QueryServer, serve

__all__ = ["Analytic", "AnalyticsError", "Handle", "QueryManager", "QueryServer", "Registry",
           "Subscription", "canonical", "default_registry", "get", "register", "registered", "serve"]
