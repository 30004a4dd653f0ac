"""The support triage flow's functions (support_triage.yaml names them).

`transfers` stands in for the telephony side of a hand-off (in memory: a real transfer is the
carrier's or the SIP stack's job); replace `transfers.transfer` to connect one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipecat.flows import TRANSITION_IN_YAML, FlowManager

CATEGORIES = ("technical", "billing", "other")
DEPARTMENTS = {"technical": "second-line technical support", "billing": "billing", "other": "customer service"}


@dataclass(frozen=True)
class Transfer:
    department: str
    summary: str


@dataclass
class Transfers:
    """Hand-offs made (a stand-in for the carrier's transfer)."""

    made: list[Transfer] = field(default_factory=list)

    async def transfer(self, department: str, summary: str) -> None:
        self.made.append(Transfer(department, summary))


transfers = Transfers()


async def classify_issue(flow_manager: FlowManager, category: str, summary: str) -> tuple[dict, object]:
    """Record what the caller's problem is about.

    Args:
        category: One of technical, billing or other.
        summary: The problem in one sentence.
    """
    category = category.strip().lower()
    if category not in CATEGORIES:
        category = "other"
    flow_manager.state.update(category=category, summary=summary, department=DEPARTMENTS[category])
    return {"category": category}, TRANSITION_IN_YAML


async def transfer_call(flow_manager: FlowManager) -> tuple[dict, object]:
    """Hand the call over to the department that handles the caller's problem."""
    department = flow_manager.state.get("department", DEPARTMENTS["other"])
    await transfers.transfer(department, flow_manager.state.get("summary", ""))
    return {"status": "transferred", "department": department}, TRANSITION_IN_YAML
