"""tools/list: every tool, its description, input and output schemas, and annotations
that tell the truth about what it does."""

from __future__ import annotations

import pytest

from conftest import Agent, agent_session

pytestmark = pytest.mark.anyio

# name: (readOnly, destructive, idempotent, openWorld, required input fields)
EXPECTED = {
    "sandbox_exec": (False, True, False, True, {"command"}),
    "sandbox_exec_background": (False, True, False, True, {"command"}),
    "sandbox_job_status": (True, False, True, False, {"job_id"}),
    "sandbox_job_kill": (False, True, True, False, {"job_id"}),
    "sandbox_job_list": (True, False, True, False, set()),
    "sandbox_files_read": (True, False, True, False, {"path"}),
    "sandbox_files_write": (False, True, False, False, {"path", "content"}),
    "sandbox_files_list": (True, False, True, False, {"path"}),
    "sandbox_files_remove": (False, True, True, False, {"path"}),
    "sandbox_files_move": (False, True, False, False, {"from", "to"}),
    "sandbox_files_mkdir": (False, False, True, False, {"path"}),
    "sandbox_files_download_dir": (True, False, True, False, {"path"}),
    "sandbox_info": (True, False, True, False, set()),
    "sandbox_create": (False, False, False, False, set()),
    "sandbox_list": (True, False, True, False, set()),
    "sandbox_pause": (False, False, True, False, {"sandbox_id"}),
    "sandbox_resume": (False, False, True, False, {"sandbox_id"}),
    "sandbox_kill": (False, True, True, False, {"sandbox_id"}),
    "sandbox_preview_url": (False, False, True, False, {"sandbox_id", "port"}),
    "sandbox_update": (False, False, True, False, {"sandbox_id"}),
    "sandbox_network_log": (True, False, True, False, {"sandbox_id"}),
    "sandbox_snapshot_create": (False, False, False, False, {"sandbox_id"}),
    "sandbox_snapshot_list": (True, False, True, False, set()),
    "sandbox_snapshot_restore": (False, True, True, False, {"sandbox_id", "snapshot"}),
    "sandbox_snapshot_delete": (False, True, True, False, {"snapshot"}),
    "sandbox_run_code": (False, True, False, True, {"language", "code"}),
    "sandbox_get_metrics": (True, False, True, False, set()),
    "sandbox_template_list": (True, False, True, False, set()),
    "sandbox_template_create": (False, False, False, True, {"name"}),
    "secret_list": (True, False, True, False, set()),
    "sandbox_attach_secret": (False, False, False, False, {"sandbox_id", "secret"}),
    "sandbox_detach_secret": (False, False, True, False, {"sandbox_id", "secret"}),
    "computer_screenshot": (True, False, True, False, set()),
    "computer_action": (False, True, False, True, {"action"}),
    "computer_stream_url": (False, False, False, False, set()),
    "browser_open": (False, False, False, True, {"url"}),
}
LIFECYCLE = {
    "sandbox_create",
    "sandbox_list",
    "sandbox_pause",
    "sandbox_resume",
    "sandbox_kill",
    "sandbox_snapshot_create",
    "sandbox_snapshot_list",
    "sandbox_snapshot_restore",
    "sandbox_snapshot_delete",
    "sandbox_template_list",
    "sandbox_template_create",
    "secret_list",
}


async def test_every_tool_is_listed_with_schemas_and_true_annotations(agent: Agent) -> None:
    async with agent_session(agent) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(listed) == set(EXPECTED), f"tools/list differs: {sorted(set(listed) ^ set(EXPECTED))}"
    for name, (read_only, destructive, idempotent, open_world, required) in EXPECTED.items():
        tool = listed[name]
        assert tool.description and len(tool.description) > 60, f"{name}: description too thin for a model"
        assert tool.input_schema["type"] == "object", name
        assert set(tool.input_schema.get("required", [])) == required, name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
        assert tool.output_schema.get("properties"), name
        if name not in LIFECYCLE:
            # Guest tools are stateless: every call may name its sandbox.
            assert "sandbox_id" in tool.input_schema["properties"], f"{name} takes no sandbox_id"
        hints = tool.annotations
        assert hints is not None, name
        assert hints.title, name
        assert hints.read_only_hint is read_only, f"{name}: readOnlyHint"
        assert hints.destructive_hint is destructive, f"{name}: destructiveHint"
        assert hints.idempotent_hint is idempotent, f"{name}: idempotentHint"
        assert hints.open_world_hint is open_world, f"{name}: openWorldHint"


async def test_input_schemas_describe_each_argument(agent: Agent) -> None:
    async with agent_session(agent) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    exec_schema = listed["sandbox_exec"].input_schema
    props = exec_schema["properties"]
    assert set(props) == {"command", "cwd", "env", "stdin", "timeout_ms", "sandbox_id"}
    for name, prop in props.items():
        assert prop.get("description"), f"sandbox_exec.{name} has no description"
    assert props["timeout_ms"]["maximum"] == 600000
    assert exec_schema.get("additionalProperties") is False, "unknown arguments should be refused"
    write = listed["sandbox_files_write"].input_schema
    encoding = str(write["properties"]["encoding"]) + str(write.get("$defs", {}))
    assert "utf8" in encoding and "base64" in encoding
    out = listed["sandbox_exec"].output_schema
    for field in ("stdout", "stderr", "stdout_truncated", "stdout_bytes", "timed_out", "duration_ms"):
        assert field in out["properties"], f"sandbox_exec output lacks {field}"
    for field in ("exit_code", "signal", "oom_killed", "notes"):
        assert f"{field} (" in out["description"], f"sandbox_exec output does not describe {field}"


def descriptions(schema) -> list[str]:
    found = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "description" and isinstance(value, str):
                found.append(value)
            else:
                found.extend(descriptions(value))
    elif isinstance(schema, list):
        for item in schema:
            found.extend(descriptions(item))
    return found


async def test_every_description_is_one_line(agent: Agent) -> None:
    async with agent_session(agent) as session:
        tools = (await session.list_tools()).tools
    for tool in tools:
        for text in [tool.description, *descriptions(tool.input_schema), *descriptions(tool.output_schema)]:
            assert text and "\n" not in text, f"{tool.name}: {text!r}"


async def test_list_entries_schema_names_every_field(agent: Agent) -> None:
    # Entries are typed in the description, not as `items`, so that clients which
    # validate every result (this SDK does) do not check each entry.
    async with agent_session(agent) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    schema = listed["sandbox_files_list"].output_schema
    assert "items" not in str(schema)
    text = schema["description"]
    for field in ("path", "type", "size", "mode", "mtime", "symlink_target", "names_only"):
        assert field in text, f"the listing's description does not name {field}"
    for group in ("files", "dirs", "symlinks", "other"):
        assert f"{group} (array): With names_only" in text, group


async def test_output_schemas_are_cheap_to_check_and_lose_nothing(agent: Agent) -> None:
    # The 1.x Python SDK checks each output schema against its metaschema on every
    # call, at a cost per property subschema: only always-present fields are listed,
    # typed and undescribed; every field, optional ones too, is described in the
    # schema's one description.
    async with agent_session(agent) as session:
        tools = (await session.list_tools()).tools
    for tool in tools:
        schema = tool.output_schema
        required = set(schema.get("required", []))
        assert set(schema["properties"]) == required, tool.name
        for name, prop in schema["properties"].items():
            assert "description" not in prop, f"{tool.name}.{name}"
            assert f"{name} (" in schema["description"], f"{tool.name} does not describe {name}"


async def test_output_schemas_have_no_refs(agent: Agent) -> None:
    # A `$ref` costs every validating client a resolution per value it checks.
    async with agent_session(agent) as session:
        tools = (await session.list_tools()).tools
    for tool in tools:
        assert "$ref" not in str(tool.output_schema), f"{tool.name} output schema has a $ref"


async def test_sandbox_results_say_what_a_sandbox_started_from(agent: Agent) -> None:
    # started_from is in every result that is a sandbox: a typed, always-present field
    # (described in the schema's description, as every field is).
    async with agent_session(agent) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    for name in ("sandbox_create", "sandbox_pause", "sandbox_snapshot_restore"):
        schema = listed[name].output_schema
        assert schema["properties"]["started_from"] == {"type": "string"}, name
        text = schema["description"]
        assert "started_from (string): What its VM started from" in text, name
        for origin in ('"boot"', '"template snapshot"', '"snapshot NAME"'):
            assert origin in text, (name, origin)
