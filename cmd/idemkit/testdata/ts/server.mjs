// An MCP server written with the official TypeScript SDK (McpServer), with
// no idemkit in it: the unprotected server the gateway's end-to-end tests
// put behind `idemkit gateway`.
//
//   node server.mjs --http 0 [--stateless] [--resumable]
//        Streamable HTTP on 127.0.0.1; prints "listening PORT"; --resumable
//        keeps an event store, so that a broken stream can be resumed
//   node server.mjs --stdio                  stdio
//
// Every execution of a tool with a side effect appends one JSON line to the
// file named by FIXTURE_LOG ({"tool", "args", "id", "pid", "auth"}), so
// that a test counts how many times the work really ran, across processes.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import { InMemoryTaskStore, InMemoryTaskMessageQueue } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';
import { z } from 'zod';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const logFile = process.env.FIXTURE_LOG;

function record(tool, args, extra) {
  const id = `${tool}_${randomUUID().slice(0, 8)}`;
  if (logFile) {
    const auth = extra?.requestInfo?.headers?.authorization ?? '';
    fs.appendFileSync(logFile, JSON.stringify({ tool, args, id, pid: process.pid, auth }) + '\n');
  }
  return id;
}

// The SDK's task store: a task belongs to the session that created it (a
// stdio process has one session).
const taskStore = new InMemoryTaskStore();

function build() {
  const server = new McpServer(
    { name: 'ts-fixture', version: '1.0.0' },
    {
      capabilities: { tasks: { requests: { tools: { call: {} } }, list: {}, cancel: {} } },
      taskStore,
      taskMessageQueue: new InMemoryTaskMessageQueue(),
    },
  );

  // A write tool with no annotations: MCP's defaults make it a write tool.
  server.registerTool(
    'issue_refund',
    {
      description: 'Refund an order.',
      inputSchema: {
        order_id: z.string(),
        amount_cents: z.number().int(),
        delay_ms: z.number().int().optional(),
      },
    },
    async (args, extra) => {
      if (args.delay_ms) await sleep(args.delay_ms);
      const id = record('issue_refund', args, extra);
      return {
        content: [{ type: 'text', text: `refund ${id} issued for ${args.order_id}` }],
        structuredContent: { refund_id: id, order_id: args.order_id, amount_cents: args.amount_cents },
      };
    },
  );

  // Read-only: never protected.
  server.registerTool(
    'lookup_order',
    {
      description: 'Look an order up.',
      inputSchema: { order_id: z.string() },
      annotations: { readOnlyHint: true },
    },
    async (args) => ({ content: [{ type: 'text', text: `order ${args.order_id}: paid` }] }),
  );

  // Idempotent: never protected.
  server.registerTool(
    'set_status',
    {
      description: 'Set an order status.',
      inputSchema: { order_id: z.string(), status: z.string() },
      annotations: { idempotentHint: true },
    },
    async (args, extra) => {
      record('set_status', args, extra);
      return { content: [{ type: 'text', text: `order ${args.order_id}: ${args.status}` }] };
    },
  );

  // A slow write tool that reports progress on every step.
  server.registerTool(
    'export_report',
    {
      description: 'Export a report, slowly.',
      inputSchema: { name: z.string(), steps: z.number().int(), step_ms: z.number().int() },
    },
    async (args, extra) => {
      const token = extra._meta?.progressToken;
      for (let i = 1; i <= args.steps; i++) {
        await sleep(args.step_ms);
        if (token !== undefined) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken: token, progress: i, total: args.steps, message: `step ${i}` },
          });
        }
      }
      // The SDK's client hands notifications to their handlers on a later
      // tick but settles a request on the tick its answer arrives: a last
      // notification read in the same chunk as the answer would be dropped
      // (it happens over stdio, with or without a gateway). Let it go first.
      await sleep(50);
      const id = record('export_report', args, extra);
      return { content: [{ type: 'text', text: `report ${id} exported` }], structuredContent: { report_id: id } };
    },
  );

  // A write tool that fails with a tool error (isError), never stored.
  server.registerTool(
    'charge_card',
    { description: 'Charge a card; declined.', inputSchema: { card: z.string() } },
    async (args, extra) => {
      record('charge_card', args, extra);
      return { isError: true, content: [{ type: 'text', text: 'card declined' }] };
    },
  );
  // A write tool that closes its SSE stream mid-call and goes on (the
  // polling pattern of MCP 2025-11-25): with --resumable the client resumes
  // the stream with GET and Last-Event-ID and gets the rest.
  server.registerTool(
    'poll_export',
    { description: 'Export with a stream break.', inputSchema: { name: z.string() } },
    async (args, extra) => {
      const token = extra._meta?.progressToken;
      const progress = (i) =>
        token === undefined
          ? Promise.resolve()
          : extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: 2 } });
      await progress(1);
      extra.closeSSEStream?.();
      await sleep(300);
      await progress(2);
      await sleep(50); // see export_report
      const id = record('poll_export', args, extra);
      return { content: [{ type: 'text', text: `export ${id} done` }], structuredContent: { export_id: id } };
    },
  );

  // A write tool that runs only as an MCP task (2025-11-25): the call
  // answers a CreateTaskResult at once, the work ends after delay_ms.
  server.experimental.tasks.registerToolTask(
    'export_task',
    {
      description: 'Export in the background, as an MCP task.',
      inputSchema: { name: z.string(), delay_ms: z.number().int() },
      execution: { taskSupport: 'required' },
    },
    {
      async createTask(args, extra) {
        const task = await extra.taskStore.createTask({ ttl: extra.taskRequestedTtl ?? 60000 });
        (async () => {
          await sleep(args.delay_ms);
          const id = record('export_task', args, extra);
          await extra.taskStore.storeTaskResult(task.taskId, 'completed', {
            content: [{ type: 'text', text: `export ${id} done for ${args.name}` }],
            structuredContent: { export_id: id },
          });
        })().catch((err) => process.stderr.write(`export_task: ${err}\n`));
        return { task };
      },
      async getTask(_args, extra) {
        return await extra.taskStore.getTask(extra.taskId);
      },
      async getTaskResult(_args, extra) {
        return await extra.taskStore.getTaskResult(extra.taskId);
      },
    },
  );

  // A write tool whose process dies under it: the upstream going away.
  server.registerTool(
    'crash_server',
    { description: 'Exit the server process mid-call.', inputSchema: { delay_ms: z.number().int() } },
    async (args) => {
      await sleep(args.delay_ms);
      process.exit(3);
    },
  );
  return server;
}

const argv = process.argv.slice(2);
if (argv[0] === '--stdio') {
  await build().connect(new StdioServerTransport());
} else if (argv[0] === '--http') {
  const port = Number(argv[1] ?? 0);
  const stateless = argv.includes('--stateless');
  const resumable = argv.includes('--resumable');
  const transports = new Map();
  const httpServer = http.createServer(async (req, res) => {
    if (!req.url.startsWith('/mcp')) {
      res.writeHead(404).end();
      return;
    }
    try {
      let body;
      if (req.method === 'POST') {
        const chunks = [];
        for await (const c of req) chunks.push(c);
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      }
      if (stateless) {
        if (req.method !== 'POST') {
          res.writeHead(405).end();
          return;
        }
        const t = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
        const s = build();
        res.on('close', () => { t.close(); s.close(); });
        await s.connect(t);
        await t.handleRequest(req, res, body);
        return;
      }
      const sid = req.headers['mcp-session-id'];
      let t = sid ? transports.get(sid) : undefined;
      if (!t) {
        if (sid || req.method !== 'POST' || !isInitializeRequest(body)) {
          res.writeHead(sid ? 404 : 400, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: sid ? 'Session not found' : 'No session' } }));
          return;
        }
        t = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          ...(resumable ? { eventStore: new InMemoryEventStore(), retryInterval: 100 } : {}),
          onsessioninitialized: (id) => transports.set(id, t),
        });
        t.onclose = () => { if (t.sessionId) transports.delete(t.sessionId); };
        await build().connect(t);
      }
      await t.handleRequest(req, res, body);
    } catch (err) {
      if (!res.headersSent) res.writeHead(500).end(String(err));
    }
  });
  httpServer.listen(port, '127.0.0.1', () => {
    process.stdout.write(`listening ${httpServer.address().port}\n`);
  });
  const stop = () => httpServer.close(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
} else {
  process.stderr.write('usage: server.mjs --http PORT [--stateless] [--resumable] | --stdio\n');
  process.exit(2);
}
