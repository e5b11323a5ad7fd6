"""Streaming analytics: clients subscribe to parameterised analytics over a pipeline's state
table, get a snapshot, then only what changed; identical subscriptions are shared."""

from .errors import AnalyticsError, LimitError
from .manager import Handle, QueryManager, Resume
from .registry import (
    Analytic,
    Registry,
    Subscription,
    canonical,
    default_registry,
    get,
    register,
    registered,
)
from .server import QueryServer, serve

__all__ = ["Analytic", "AnalyticsError", "Handle", "LimitError", "QueryManager", "QueryServer",
           "Registry", "Resume", "Subscription", "canonical", "default_registry", "get", "register",
           "registered", "serve"]
