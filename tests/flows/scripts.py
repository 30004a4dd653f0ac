"""What the scripted LLM answers in the example flows: deterministic stand-ins for a real model,
reading the request as a model would (the node's task message, the tools offered, what the caller
said) and calling the flow's tools with arguments taken from the caller's words."""

from __future__ import annotations

import json
import re

from agent.scripted_llm import Reply, ToolCall, Turn


def task_text(turn: Turn) -> str:
    """The newest developer or system message: the current node's task."""
    for message in reversed(turn.messages):
        if isinstance(message, dict) and message.get("role") in ("developer", "system"):
            return str(message.get("content", ""))
    return ""


def last_tool_result(turn: Turn) -> dict:
    for message in reversed(turn.messages):
        if isinstance(message, dict) and message.get("role") == "tool":
            try:
                return json.loads(message.get("content") or "{}")
            except json.JSONDecodeError:
                return {}
    return {}


BOOKING_QUESTIONS = {
    "record_party_size": "Hello, Trattoria Cadenza. How many people is the table for?",
    "record_date_and_time": "Which day, and at what time?",
    "record_name": "And what name should the booking be under?",
}


def booking(turn: Turn) -> str | Reply:
    tools, heard, task = set(turn.tools), turn.user_text, task_text(turn)
    if turn.last_role == "tool":
        return f"Sorry, {last_tool_result(turn).get('error', 'that did not work')}."
    if turn.last_role == "user":
        if "record_party_size" in tools and (m := re.search(r"\d+", heard)):
            return Reply("Lovely.", (ToolCall("record_party_size", {"party_size": int(m.group())}),))
        date, time = re.search(r"\d{4}-\d{2}-\d{2}", heard), re.search(r"\b\d{1,2}:\d{2}\b", heard)
        if "record_date_and_time" in tools and date and time:
            return Reply(tool_calls=(ToolCall("record_date_and_time", {"date": date.group(), "time": time.group()}),))
        if "record_name" in tools and (m := re.search(r"name is (.+?)\.?$", heard)):
            return Reply(tool_calls=(ToolCall("record_name", {"name": m.group(1)}),))
        if "book_table" in tools and heard.lower().startswith("yes"):
            m = re.search(r"a table for (\d+) on (\S+) at (\S+), under the name (.+?)\. Ask", task)
            details = {"party_size": int(m.group(1)), "date": m.group(2), "time": m.group(3), "name": m.group(4)}
            return Reply("Booking it now.", (ToolCall("book_table", details),))
        if "change_details" in tools:
            return Reply(tool_calls=(ToolCall("change_details"),))
        return "Sorry, could you say that again?"
    for tool, question in BOOKING_QUESTIONS.items():
        if tool in tools:
            return question
    if "book_table" in tools:
        m = re.search(r"(a table for .+?, under the name .+?)\. Ask", task)
        return f"So that is {m.group(1)}. Shall I book it?"
    if m := re.search(r"reference (TC-\d+)", task):
        return f"Your table is booked, the reference is {m.group(1)}. Goodbye!"
    return "Goodbye!"


def triage(turn: Turn) -> str | Reply:
    tools, heard, task = set(turn.tools), turn.user_text.lower(), task_text(turn)
    if turn.last_role == "user":
        if "classify_issue" in tools:
            category = ("technical" if re.search(r"internet|router|wifi", heard)
                        else "billing" if re.search(r"bill|charge", heard) else "other")
            return Reply(tool_calls=(ToolCall("classify_issue", {"category": category,
                                                                 "summary": turn.user_text}),))
        if "problem_solved" in tools:
            return Reply(tool_calls=(ToolCall("problem_solved" if heard.startswith("yes") else "still_broken"),))
        return "Sorry, could you say that again?"
    if "classify_issue" in tools:
        return "Cadence Telecom support. What seems to be the problem?"
    if "problem_solved" in tools:
        return "Please restart your router. Did that fix it?"
    if "transfer_call" in tools:
        m = re.search(r"transferring them to (.+?), then", task)
        return Reply(f"I am transferring you to {m.group(1)}.", (ToolCall("transfer_call"),))
    if "connected now" in task:
        return "Connecting you now."
    return "Glad it works again. Goodbye!"
