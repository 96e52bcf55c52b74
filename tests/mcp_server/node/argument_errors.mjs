// The official TypeScript SDK client (@modelcontextprotocol/sdk) against `rlide serve` over stdio:
// prompts/get and tools/call with bad arguments. Prints one JSON line of what the client saw.
// argv: <rlide executable> <the SDK's dist/esm folder>; the server's environment is this process's.
import { pathToFileURL } from "node:url";

const esm = (path) => import(pathToFileURL(`${process.argv[3]}/${path}`).href);
const { Client } = await esm("client/index.js");
const { StdioClientTransport } = await esm("client/stdio.js");

const transport = new StdioClientTransport({ command: process.argv[2], args: ["serve"], env: process.env, stderr: "ignore" });
const client = new Client({ name: "ts-sdk-test", version: "0" });
await client.connect(transport);

const prompts = {};
for (const [label, args] of [
  ["missing", {}],
  ["invalid", { task: "" }],
  ["extra", { task: "x", bogus: "y" }],
]) {
  try {
    await client.getPrompt({ name: "start-task", arguments: args });
    prompts[label] = { ok: true };
  } catch (error) {
    prompts[label] = { code: error.code, message: error.message };
  }
}
const good = await client.getPrompt({ name: "start-task", arguments: { task: "fix the parser" } });
const tool = await client.callTool({ name: "give_feedback", arguments: { rating: "very good", comment: 5 } });
console.log(JSON.stringify({ prompts, good: good.messages.length, tool }));
await client.close();
