"""kernelscout: agent."""

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """The base of the agent's records: immutable, and unknown fields are an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")
