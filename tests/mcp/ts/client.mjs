// Drives a lionfactory MCP server with the TypeScript SDK's client and prints
// what it saw as one JSON line. Usage:
//   node client.mjs stdio <command> [args...]
//   node client.mjs http <url>
// Every call's outcome is recorded, a thrown error included: the SDK throws
// when structured content does not match the tool's advertised output schema.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [kind, target, ...rest] = process.argv.slice(2);
const transport =
  kind === "stdio"
    ? new StdioClientTransport({ command: target, args: rest, env: { ...process.env } })
    : new StreamableHTTPClientTransport(new URL(target));
const client = new Client({ name: "lionfactory-ts-test", version: "0.0.0" });
await client.connect(transport);

const calls = {
  read: { name: "reader", arguments: { action: "read", path: "notes.txt" } },
  invalid: { name: "reader", arguments: { action: "reed", path: "notes.txt" } },
  refused: {
    name: "editor",
    arguments: { action: "edit", file_path: "notes.txt", old_string: "zzz", new_string: "q" },
  },
  failed: { name: "bash", arguments: { command: "false" } },
};
const out = { version: client.getServerVersion()?.name, tools: [] };
out.tools = (await client.listTools()).tools.map((tool) => tool.name);
for (const [key, request] of Object.entries(calls)) {
  try {
    const result = await client.callTool(request);
    out[key] = {
      isError: result.isError ?? false,
      text: result.content.map((block) => block.text ?? "").join("\n"),
      structured: result.structuredContent ?? null,
    };
  } catch (error) {
    out[key] = { threw: String(error) };
  }
}
console.log(JSON.stringify(out));
await client.close();
