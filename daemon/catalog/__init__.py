"""The one tool catalog every transport shares, a module per concept:

  access    who may call: policies, Guard, Caller, the transports' caller kinds
  model     the tool model: ToolSpec, Availability, CallContext, Outcome, Invocation
  schemas   JSON Schema: the validator cache, errors with the catalog's codes, defaults
  registry  the Catalog: registration, listing, and the call pipeline

The modules import downwards only (registry -> schemas, model -> access). Every name is
re-exported here, so `from daemon.catalog import X` reads the same as when this was one module.
"""

from daemon.catalog.access import (
    CALLER_KINDS,
    POLICIES,
    Audience,
    Caller,
    Guard,
    Policy,
    check_guard,
    in_process,
    needs_token,
    policy_rank,
)
from daemon.catalog.model import (
    AVAILABLE,
    EVIDENCE_TOOL,
    PLATFORMS,
    SCREEN_NOT_SETTLED,
    TREE_TOOL,
    AfterCall,
    Availability,
    CallContext,
    Deferred,
    Exposure,
    Handler,
    InputMode,
    Invocation,
    Outcome,
    RawText,
    SchemaFor,
    ToolSpec,
    unknown_spec,
)
from daemon.catalog.registry import Began, Catalog, flatten_arguments
from daemon.catalog.schemas import (
    object_schema,
    schema_errors,
    sha256_revision,
    validation_error,
    with_defaults,
)

__all__ = [
    "AVAILABLE",
    "CALLER_KINDS",
    "EVIDENCE_TOOL",
    "PLATFORMS",
    "POLICIES",
    "SCREEN_NOT_SETTLED",
    "TREE_TOOL",
    "AfterCall",
    "Audience",
    "Availability",
    "Began",
    "CallContext",
    "Caller",
    "Catalog",
    "Deferred",
    "Exposure",
    "Guard",
    "Handler",
    "InputMode",
    "Invocation",
    "Outcome",
    "Policy",
    "RawText",
    "SchemaFor",
    "ToolSpec",
    "check_guard",
    "flatten_arguments",
    "in_process",
    "needs_token",
    "object_schema",
    "policy_rank",
    "schema_errors",
    "sha256_revision",
    "unknown_spec",
    "validation_error",
    "with_defaults",
]
