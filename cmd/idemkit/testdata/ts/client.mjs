// A driver for the official TypeScript MCP client, steered by a Go test
// over stdin/stdout: one JSON command per line in, one JSON answer per line
// out. Commands run concurrently; each answer carries its command's seq.
//
//   {"seq":1,"op":"connect","conn":"a","url":"http://127.0.0.1:PORT/mcp","token":"t1"}
//   {"seq":2,"op":"connect","conn":"s","command":"idemkit","args":["gateway","--stdio",...],"env":{...}}
//   {"seq":3,"op":"list","conn":"a"}                      -> {"seq":3,"ok":true,"result":{"tools":[...]}}
//   {"seq":4,"op":"call","conn":"a","tool":"issue_refund","args":{...},"progress":true,"timeoutMs":30000}
//        -> {"seq":4,"ok":true,"result":{CallToolResult},"progress":[{progress,total,message},...]}
//   {"seq":5,"op":"close","conn":"a"}
//   {"seq":6,"op":"session","conn":"a"}                   -> {"seq":6,"ok":true,"result":"<Mcp-Session-Id>"}
//   {"seq":7,"op":"request","conn":"a","method":"tasks/get","params":{"taskId":"…"}} -> {"seq":7,"ok":true,"result":{...}}
//        any request, its result unchecked (a task-augmented tools/call, the task methods)
//
// A failed command answers {"seq":N,"ok":false,"error":"...","code":N}.
import readline from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { z } from 'zod';

const conns = new Map();
const anyResult = z.object({}).passthrough();
const out = (msg) => process.stdout.write(JSON.stringify(msg) + '\n');

async function handle(cmd) {
  switch (cmd.op) {
    case 'connect': {
      let transport;
      if (cmd.url) {
        const headers = {};
        if (cmd.token) headers.Authorization = `Bearer ${cmd.token}`;
        transport = new StreamableHTTPClientTransport(new URL(cmd.url), { requestInit: { headers } });
      } else {
        transport = new StdioClientTransport({
          command: cmd.command,
          args: cmd.args ?? [],
          env: { ...process.env, ...(cmd.env ?? {}) },
          stderr: 'inherit',
        });
      }
      const client = new Client({ name: 'ts-driver', version: '1.0.0' });
      await client.connect(transport);
      conns.set(cmd.conn, { client, transport });
      return { serverVersion: client.getServerVersion(), protocol: transport.protocolVersion ?? null };
    }
    case 'list': {
      const c = conn(cmd);
      return await c.client.listTools();
    }
    case 'call': {
      const c = conn(cmd);
      const progress = [];
      const opts = { timeout: cmd.timeoutMs ?? 60000 };
      if (cmd.progress) {
        opts.onprogress = (p) => progress.push(p);
        opts.resetTimeoutOnProgress = true;
      }
      const params = { name: cmd.tool, arguments: cmd.args ?? {} };
      if (cmd.meta) params._meta = cmd.meta;
      const result = await c.client.callTool(params, undefined, opts);
      return { result, progress };
    }
    case 'request': {
      const c = conn(cmd);
      return await c.client.request({ method: cmd.method, params: cmd.params ?? {} }, anyResult, { timeout: cmd.timeoutMs ?? 60000 });
    }
    case 'session':
      return conn(cmd).transport.sessionId ?? null;
    case 'close': {
      const c = conn(cmd);
      if (cmd.terminate && c.transport.terminateSession) await c.transport.terminateSession();
      await c.client.close();
      conns.delete(cmd.conn);
      return null;
    }
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

function conn(cmd) {
  const c = conns.get(cmd.conn);
  if (!c) throw new Error(`no connection ${cmd.conn}`);
  return c;
}

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  if (!line.trim()) return;
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch (err) {
    out({ seq: -1, ok: false, error: `bad command: ${err.message}` });
    return;
  }
  handle(cmd).then(
    (r) => {
      if (cmd.op === 'call') out({ seq: cmd.seq, ok: true, result: r.result, progress: r.progress });
      else out({ seq: cmd.seq, ok: true, result: r });
    },
    (err) => out({ seq: cmd.seq, ok: false, error: String(err?.message ?? err), code: err?.code ?? null }),
  );
});
rl.on('close', async () => {
  for (const c of conns.values()) await c.client.close().catch(() => {});
  process.exit(0);
});
