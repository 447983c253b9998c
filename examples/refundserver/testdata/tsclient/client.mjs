// client.mjs drives the refund desk with the official MCP TypeScript SDK
// client, as a Node agent would, and prints what it saw as one JSON object
// on stdout for TestTypeScriptClient (examples/refundserver) to check.
//
//	node client.mjs http://127.0.0.1:PORT/mcp demo-token-alice
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, CreateTaskResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, token] = process.argv.slice(2);
const REPLAY = "io.idemkit/replay";
const REFUSAL = "io.idemkit/refusal";

async function connect() {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "idemkit-ts-e2e", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

// summary keeps what the Go test checks of a CallToolResult.
function summary(res) {
  const meta = res._meta ?? {};
  return {
    isError: res.isError === true,
    text: (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n"),
    replayed: meta[REPLAY]?.replayed === true,
    writeID: meta[REPLAY]?.write_id ?? null,
    refusal: meta[REFUSAL]?.reason ?? null,
    statusTool: meta[REFUSAL]?.status_tool ?? null,
    refundID: res.structuredContent?.refund_id ?? null,
  };
}

const out = {};
const { client, transport } = await connect();
const call = async (args) => summary(await client.callTool({ name: "issue_refund", arguments: args }));

out.sessionId = transport.sessionId ?? null;
out.tools = Object.fromEntries(
  (await client.listTools()).tools.map((t) => [
    t.name,
    {
      hasKey: Boolean(t.inputSchema?.properties?.idempotency_key),
      retriesSafe: (t.description ?? "").includes("Retries are safe"),
    },
  ]),
);

// Mistyped retries are rejected before anything runs.
out.mistyped = [await call({ order_id: "ord_1001", amount_cents: "100" }), await call({ order_id: "ord_1001", amount_cents: 12.5 })];

// The same refund twice: one refund, the second is the replay.
out.first = await call({ order_id: "ord_1003", amount_cents: 250 });
out.second = await call({ order_id: "ord_1003", amount_cents: 250 });

// An explicit key reused with another amount is a mismatch.
out.keyed = await call({ order_id: "ord_1005", amount_cents: 300, idempotency_key: "ts-key-1" });
out.mismatch = await call({ order_id: "ord_1005", amount_cents: 301, idempotency_key: "ts-key-1" });

// Five identical calls at once on an order paid through the slow gateway.
out.concurrent = await Promise.all(Array.from({ length: 5 }, () => call({ order_id: "ord_1004", amount_cents: 100 })));

// MCP tasks, where the server advertises them (mcp-go): a task-augmented
// refund, its duplicate (the first call's task, replayed), then the SDK's
// own task stream (create, poll tasks/get, fetch tasks/result) for the same
// refund, which finds that task too.
out.tasksCapability = Boolean(client.getServerCapabilities()?.tasks?.requests?.tools?.call);
if (out.tasksCapability) {
  const args = { order_id: "ord_1006", amount_cents: 400 };
  const create = () =>
    client.request({ method: "tools/call", params: { name: "issue_refund", arguments: args } }, CreateTaskResultSchema, { task: { ttl: 60000 } });
  const first = await create();
  const dup = await create();
  const meta = (r) => r._meta ?? {};
  out.taskFirst = { taskId: first.task.taskId, status: first.task.status, replayed: meta(first)[REPLAY]?.replayed === true };
  out.taskDuplicate = { taskId: dup.task.taskId, status: dup.task.status, replayed: meta(dup)[REPLAY]?.replayed === true };
  out.taskEvents = [];
  for await (const m of client.experimental.tasks.callToolStream({ name: "issue_refund", arguments: args }, CallToolResultSchema, { task: { ttl: 60000 } })) {
    out.taskEvents.push(m.type);
    if (m.type === "taskCreated") out.streamTaskId = m.task.taskId;
    if (m.type === "result") out.taskResult = summary(m.result);
    if (m.type === "error") out.taskError = String(m.error);
  }
  out.taskGet = (await client.experimental.tasks.getTask(first.task.taskId)).status;
  out.taskList = (await client.experimental.tasks.listTasks()).tasks.map((t) => t.taskId);
  try {
    await client.experimental.tasks.cancelTask(first.task.taskId);
    out.cancelCompleted = 0;
  } catch (e) {
    out.cancelCompleted = e.code ?? -1;
  }
}

// A new session (a reconnect) still finds the refund: keys follow the caller.
await client.close();
const again = await connect();
out.reconnectSessionId = again.transport.sessionId ?? null;
out.afterReconnect = summary(await again.client.callTool({ name: "issue_refund", arguments: { order_id: "ord_1003", amount_cents: 250 } }));
await again.client.close();

process.stdout.write(JSON.stringify(out) + "\n");
