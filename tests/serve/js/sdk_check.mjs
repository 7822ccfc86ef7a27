// Drives a running `plait serve` with the unmodified LangGraph JS SDK and checks its answers.
//
//   node sdk_check.mjs <base-url> [api-key]     (or PLAIT_SERVE_URL, LANGGRAPH_API_KEY)
//
// The server must serve tests/serve/_serve_support.py's `chat` graph. Exit code 0 and one JSON
// line (the summary: every check, "ok" or "skip: <why>") on stdout when every check holds;
// exit code 1 and the first mismatch on stderr otherwise.
//
// Gates: a run whose message names a gate waits in the `gate` node while the gate is held,
// which is how the script keeps a run active (multitask reject, cancel). The server runs in
// the process that holds the gates (tests/serve/test_js_sdk.py), so the script asks it, one
// line each on stdout, and waits for the line `ok` on stdin before it goes on:
//   HOLD <name>      make the gate <name> (closed) before a run reaches it
//   RELEASE <name>   open it
// With PLAIT_SDK_CHECK_NO_GATES=1 (a server without a gate keeper) those checks are skipped.
// With PLAIT_SDK_CHECK_NO_STORE=1 (a server whose store keeps no memory, the file store) the
// memory store's checks expect client.store's calls refused, with the server's reason.

import { readFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline";
import { Client } from "@langchain/langgraph-sdk";

const url = process.argv[2] ?? process.env.PLAIT_SERVE_URL;
const apiKey = process.argv[3] ?? process.env.LANGGRAPH_API_KEY;
const sdkVersion = JSON.parse(
  readFileSync(new URL("./node_modules/@langchain/langgraph-sdk/package.json", import.meta.url), "utf8"),
).version;

const client = new Client({ apiUrl: url, apiKey: apiKey ?? null, timeoutMs: 30_000 });
const suite = randomUUID(); // every thread this check makes carries it in its metadata
const checks = {};

class Mismatch extends Error {}

function fail(what, got) {
  throw new Mismatch(`${what}; got ${JSON.stringify(got)}`);
}

function expect(ok, what, got) {
  if (!ok) fail(what, got);
}

function same(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

async function check(name, fn) {
  try {
    await fn();
  } catch (err) {
    // some of the SDK's errors have a read-only message: wrap, keeping the original as the cause
    const Kind = err instanceof Mismatch ? Mismatch : Error;
    throw new Kind(`${name}: ${err?.message ?? err}`, { cause: err });
  }
  checks[name] ??= "ok";
}

function skip(name, why) {
  checks[name] = `skip: ${why}`;
}

/** What the SDK raised for a request that was to fail with HTTP `status`. */
async function refused(status, what, call) {
  try {
    await call();
  } catch (err) {
    expect(err?.status === status, `${what}: the SDK should raise an HTTP ${status} error`, String(err));
    return err;
  }
  fail(`${what}: expected HTTP ${status}, the call succeeded`, null);
}

async function collect(iterable) {
  const events = [];
  for await (const event of iterable) events.push(event);
  return events;
}

function user(content) {
  return { messages: [{ role: "user", content }] };
}

function lastMessage(values) {
  return values?.messages?.at(-1)?.content;
}

// -- the gate keeper's protocol ------------------------------------------------------------------

const gatesOff = process.env.PLAIT_SDK_CHECK_NO_GATES === "1";
const stdinLines = gatesOff ? null : createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function ask(line) {
  process.stdout.write(`${line}\n`);
  const answer = await stdinLines.next();
  if (answer.done || answer.value.trim() !== "ok") fail(`the gate keeper did not answer ${line} with ok`, answer);
}

// -- the checks ----------------------------------------------------------------------------------

async function main() {
  expect(typeof url === "string" && /^https?:\/\//.test(url), "usage: node sdk_check.mjs <base-url> [api-key]", url);

  await check("assistants.search", async () => {
    const all = await client.assistants.search();
    expect(Array.isArray(all) && all.some((a) => a.graph_id === "chat"), "assistants.search() lists chat", all);
    const chat = await client.assistants.search({ graphId: "chat" });
    expect(chat.length === 1 && chat[0].assistant_id, "assistants.search({graphId}) finds chat once", chat);
  });

  let main;
  await check("threads.create", async () => {
    main = await client.threads.create({ metadata: { suite, kind: "main" } });
    expect(typeof main.thread_id === "string", "a thread_id", main);
    expect(main.metadata?.suite === suite && main.status === "idle", "the metadata given, status idle", main);
  });
  const tid = main.thread_id;

  let first;
  let firstRunId;
  await check("runs.stream", async () => {
    let created;
    first = await collect(
      client.runs.stream(tid, "chat", {
        input: user("hello"),
        streamMode: ["values", "updates"],
        onRunCreated: (meta) => {
          created = meta;
        },
      }),
    );
    expect(first[0]?.event === "metadata" && typeof first[0].data?.run_id === "string", "metadata first", first[0]);
    firstRunId = first[0].data.run_id;
    expect(created?.run_id === firstRunId && created?.thread_id === tid, "onRunCreated's ids", created);
    const names = first.map((e) => e.event);
    expect(names.includes("values") && names.includes("updates"), "values and updates events", names);
    const ids = first.map((e) => Number(e.id));
    expect(
      ids.every((id, i) => Number.isInteger(id) && (i === 0 || id > ids[i - 1])),
      "event ids that increase",
      first.map((e) => e.id),
    );
    const values = first.filter((e) => e.event === "values").at(-1).data;
    expect(lastMessage(values) === "echo: hello" && values.turns === 1, "the last values: the reply", values);
    expect(
      first.some((e) => e.event === "updates" && lastMessage(e.data.reply) === "echo: hello"),
      "an update of reply",
      first,
    );
  });

  await check("runs.joinStream with Last-Event-ID", async () => {
    const from = first[1].id;
    const later = await collect(client.runs.joinStream(tid, firstRunId, { lastEventId: from }));
    expect(
      same(
        later.map((e) => [e.id, e.event]),
        first.slice(2).map((e) => [e.id, e.event]),
      ),
      `only the events after ${from}`,
      later.map((e) => [e.id, e.event]),
    );
    const all = await collect(client.runs.joinStream(tid, firstRunId, { lastEventId: "-1" }));
    expect(
      same(
        all.map((e) => [e.id, e.event, e.data]),
        first.map((e) => [e.id, e.event, e.data]),
      ),
      "every event again with Last-Event-ID -1",
      all.map((e) => [e.id, e.event]),
    );
  });

  await check("interrupt and resume", async () => {
    const events = await collect(client.runs.stream(tid, "chat", { input: user("please approve"), streamMode: "values" }));
    const last = events.filter((e) => e.event === "values").at(-1)?.data;
    const pending = last?.__interrupt__;
    expect(
      Array.isArray(pending) && pending[0]?.value?.question === "send it?" && typeof pending[0]?.id === "string",
      "__interrupt__ in the last values event",
      last,
    );
    const thread = await client.threads.get(tid);
    expect(thread.status === "interrupted", "the thread's status interrupted", thread.status);
    const state = await client.threads.getState(tid);
    expect(same(state.next, ["approve"]) && state.tasks[0]?.interrupts?.length === 1, "approve next, paused", state);
    const resumed = await collect(
      client.runs.stream(tid, "chat", { command: { resume: "yes" }, streamMode: "values" }),
    );
    const values = resumed.filter((e) => e.event === "values").at(-1)?.data;
    expect(lastMessage(values) === "approved: yes" && !values.__interrupt__, "the resumed run's answer", values);
    expect((await client.threads.get(tid)).status === "idle", "idle after the resume", null);
  });

  let edited;
  await check("threads.updateState", async () => {
    edited = await client.threads.updateState(tid, { values: user("edited by hand"), asNode: "approve" });
    expect(typeof edited?.checkpoint?.checkpoint_id === "string", "the new checkpoint", edited);
    const state = await client.threads.getState(tid);
    expect(state.checkpoint.checkpoint_id === edited.checkpoint.checkpoint_id, "the head is the update", state);
    expect(lastMessage(state.values) === "edited by hand", "the message added", state.values);
  });

  let history;
  await check("threads.getHistory", async () => {
    // 9 checkpoints: the thread's empty root, input, gate and reply of two turns, approve, the update
    history = await client.threads.getHistory(tid, { limit: 10 });
    expect(Array.isArray(history) && history.length === 9, "the thread's nine states", history.length);
    expect(history[0].checkpoint.checkpoint_id === edited.checkpoint.checkpoint_id, "newest first", history[0]);
    expect(history[8].parent_checkpoint === null && same(history[8].values, { messages: [], turns: 0 }), "the empty root last", history[8]);
    expect(history[7].metadata.source === "input", "the first input's parent is the root", history[7]);
    const three = await client.threads.getHistory(tid, { limit: 3 });
    expect(same(three, history.slice(0, 3)), "limit 3: the newest three", three);
    for (let i = 0; i + 1 < history.length; i += 1) {
      const [a, b] = [history[i], history[i + 1]];
      expect(
        a.parent_checkpoint?.checkpoint_id === b.checkpoint?.checkpoint_id && a.metadata.step > b.metadata.step,
        `state ${i}'s parent_checkpoint is state ${i + 1}'s checkpoint`,
        [a.parent_checkpoint, b.checkpoint],
      );
    }
  });

  await check("branch from a past checkpoint", async () => {
    const all = await client.threads.getHistory(tid, { limit: 100 });
    const past = all.find((s) => s.values?.messages?.length === 2 && s.next.length === 0);
    expect(past && lastMessage(past.values) === "echo: hello", "the state after the first turn", past);
    const values = await client.runs.wait(tid, "chat", {
      input: user("branch"),
      checkpoint: { checkpoint_id: past.checkpoint.checkpoint_id },
    });
    const contents = values.messages.map((m) => m.content);
    expect(same(contents, ["hello", "echo: hello", "branch", "echo: branch"]), "the branch's messages", contents);
    // the history lists every branch, newest first (as LangGraph's): the old head stays in it
    const now = await client.threads.getHistory(tid, { limit: 100 });
    const chain = now.map((s) => s.checkpoint.checkpoint_id);
    expect(same(chain, [...chain].sort().reverse()), "newest first", chain);
    expect(chain.includes(past.checkpoint.checkpoint_id), "the past state the branch went from", chain);
    expect(chain.includes(edited.checkpoint.checkpoint_id), "the old branch's head, still listed", chain);
    const head = await client.threads.getState(tid);
    expect(head.checkpoint.checkpoint_id === chain[0], "the thread's head is the branch's, listed first", head.checkpoint);
    const children = now.filter((s) => s.parent_checkpoint?.checkpoint_id === past.checkpoint.checkpoint_id);
    expect(children.length === 2, "two branches from the past state (what useStream's switcher shows)", children);
  });

  let copy;
  await check("threads.copy", async () => {
    copy = await client.threads.copy(tid);
    expect(copy.thread_id && copy.thread_id !== tid && copy.metadata?.suite === suite, "a new thread", copy);
    const [a, b] = await Promise.all([client.threads.getState(tid), client.threads.getState(copy.thread_id)]);
    expect(same(a.values, b.values), "the copy's values", [a.values, b.values]);
  });

  let waited;
  await check("runs.wait", async () => {
    waited = await client.threads.create({ metadata: { suite, kind: "wait" } });
    const values = await client.runs.wait(waited.thread_id, "chat", { input: user("wait for me") });
    expect(lastMessage(values) === "echo: wait for me", "the run's last values", values);
    const stateless = await client.runs.wait(null, "chat", { input: user("stateless") });
    expect(lastMessage(stateless) === "echo: stateless", "a stateless run's last values", stateless);
  });

  const gated = [];
  if (gatesOff) {
    for (const name of [
      "multitask reject",
      "runs.cancel rollback, pending",
      "runs.cancel interrupt",
      "runs.cancel rollback, running",
    ]) {
      skip(name, "PLAIT_SDK_CHECK_NO_GATES=1: no gate keeper");
    }
  } else {
    await gatedChecks(gated);
  }

  await check("threads.search by metadata", async () => {
    const made = [tid, copy.thread_id, waited.thread_id, ...gated].sort();
    const found = await client.threads.search({ metadata: { suite }, limit: 100 });
    expect(same(found.map((t) => t.thread_id).sort(), made), "every thread of this check, no other", found);
    const mains = await client.threads.search({ metadata: { suite, kind: "main" } });
    expect(same(mains.map((t) => t.thread_id).sort(), [tid, copy.thread_id].sort()), "the main thread and its copy", mains);
    const count = await client.threads.count({ metadata: { suite } });
    expect(count === made.length, "threads.count", count);
  });

  await check("runs.stream messages-tuple", async () => {
    const talk = await client.threads.create({ metadata: { suite, kind: "talk" } });
    const events = await collect(
      client.runs.stream(talk.thread_id, "chat", { input: user("tell me more"), streamMode: ["messages-tuple", "values"] }),
    );
    const chunks = events.filter((e) => e.event === "messages").map((e) => e.data);
    const text = chunks.map(([chunk]) => chunk.content).join("");
    expect(text === "echo: tell me more", "the chunks add up to the answer", chunks);
    expect(new Set(chunks.map(([chunk]) => chunk.id)).size === 1, "every chunk of the answer has its id", chunks);
    expect(chunks[0][1].langgraph_node === "reply", "the metadata names the node", chunks[0]);
    const last = events.filter((e) => e.event === "values").at(-1).data.messages.at(-1);
    expect(last.id === chunks[0][0].id && last.content === text, "the stored answer is the streamed one", last);
  });

  await check("runs.joinStream without a thread", async () => {
    const run = await client.runs.create(null, "chat", { input: user("stateless"), streamMode: ["values"] });
    const events = await collect(client.runs.joinStream(null, run.run_id, { lastEventId: "-1" }));
    expect(events[0]?.event === "metadata" && events[0].data.run_id === run.run_id, "metadata first", events);
    const values = events.filter((e) => e.event === "values").at(-1)?.data;
    expect(lastMessage(values) === "echo: stateless", "the stateless run's answer", events);
  });

  await check("runs.cancelMany", async () => {
    const later = await client.threads.create({ metadata: { suite, kind: "later" } });
    const run = await client.runs.create(later.thread_id, "chat", { input: user("later"), afterSeconds: 600 });
    await client.runs.cancelMany({ threadId: later.thread_id, runIds: [run.run_id], action: "interrupt" });
    const after = await client.runs.get(later.thread_id, run.run_id);
    expect(after.status === "interrupted", "the waiting run never starts", after);
  });

  await check("threads.create with supersteps", async () => {
    const seeded = await client.threads.create({
      metadata: { suite, kind: "seeded" },
      graphId: "chat",
      supersteps: [{ updates: [{ values: user("seeded"), asNode: "reply" }] }],
    });
    const state = await client.threads.getState(seeded.thread_id);
    expect(lastMessage(state.values) === "seeded", "the thread starts from its updates", state);
    const answer = await client.runs.wait(seeded.thread_id, "chat", { input: user("next") });
    expect(same(answer.messages.map((m) => m.content), ["seeded", "next", "echo: next"]), "it goes on", answer);
  });

  await check("threads.patchState", async () => {
    const plain = await client.threads.create({ metadata: { suite, kind: "patch" } });
    await client.runs.wait(plain.thread_id, "chat", { input: user("keep me") });
    const before = await client.threads.getState(plain.thread_id);
    // plait never rewrites a checkpoint: refused with a 409 that says what to do instead
    const err = await refused(409, "a checkpoint's metadata edited in place", () =>
      client.threads.patchState(plain.thread_id, { reviewed: true }),
    );
    expect(/never rewrites a stored checkpoint/.test(err.message), "the server's reason", err.message);
    expect(/threads\.update/.test(err.message), "what to do instead", err.message);
    const after = await client.threads.getState(plain.thread_id);
    expect(same(after, before), "the state is as it was", after);
  });

  await check("threads.joinStream", async () => {
    const joined = await client.threads.create({ metadata: { suite, kind: "joined" } });
    const jid = joined.thread_id;
    const runA = await client.runs.create(jid, "chat", { input: user("one"), streamMode: ["values"] });
    const own = await collect(client.runs.joinStream(jid, runA.run_id, { lastEventId: "-1" }));
    // from after runA's first event: the rest of runA, its end, then a run made after the join
    const abort = new AbortController();
    const parts = [];
    let runB;
    for await (const event of client.threads.joinStream(jid, { lastEventId: `${runA.run_id}:1`, signal: abort.signal })) {
      parts.push(event);
      if (event.event === "run_done" && event.data.run_id === runA.run_id) {
        runB = await client.runs.create(jid, "chat", { input: user("two"), streamMode: ["values"] });
      } else if (event.event === "run_done") break;
    }
    abort.abort();
    const a = parts.filter((e) => e.id.startsWith(runA.run_id) && e.event !== "run_done");
    expect(
      same(a.map((e) => [e.event, e.data]), own.slice(1).map((e) => [e.event, e.data])),
      "runA's events after its first, as its own stream sent them",
      a.map((e) => [e.id, e.event]),
    );
    const ends = parts.filter((e) => e.event === "run_done").map((e) => [e.data.run_id, e.data.status]);
    expect(same(ends, [[runA.run_id, "success"], [runB.run_id, "success"]]), "each run's run_done", ends);
    const b = parts.filter((e) => e.id.startsWith(runB.run_id));
    expect(b[0]?.event === "metadata" && b[0].data.run_id === runB.run_id, "runB from its metadata event", b[0]);
    const values = b.filter((e) => e.event === "values").at(-1)?.data;
    expect(lastMessage(values) === "echo: two", "runB's answer", values);
    // lifecycle only: the start and end of each run after runA
    const life = new AbortController();
    const seen = [];
    for await (const event of client.threads.joinStream(jid, {
      lastEventId: `${runA.run_id}:done`,
      streamMode: "lifecycle",
      signal: life.signal,
    })) {
      seen.push([event.event, event.data.run_id]);
      if (event.event === "run_done") break;
    }
    life.abort();
    expect(same(seen, [["run_start", runB.run_id], ["run_done", runB.run_id]]), "runB's start and end", seen);
  });

  if (process.env.PLAIT_SDK_CHECK_NO_STORE === "1") await storeRefused();
  else await storeChecks();

  return {
    ok: true,
    sdk: "@langchain/langgraph-sdk",
    sdk_version: sdkVersion,
    url,
    api_key: Boolean(apiKey),
    thread_id: tid,
    events: first.length,
    checks,
  };
}

/** client.store against the served memory store, in a namespace of this check's own. */
async function storeChecks() {
  const ns = ["sdk-check", suite];
  await check("store.putItem and getItem", async () => {
    await client.store.putItem([...ns, "notes"], "n1", { text: "first", tags: ["a"] });
    const item = await client.store.getItem([...ns, "notes"], "n1");
    expect(same(item.namespace, [...ns, "notes"]) && item.key === "n1", "the item's namespace and key", item);
    // a SQL store may give an object's keys back in another order (PostgreSQL's jsonb does)
    const keys = Object.keys(item.value).sort();
    const asPut = same(keys, ["tags", "text"]) && item.value.text === "first" && same(item.value.tags, ["a"]);
    expect(asPut, "the value put", item.value);
    expect(!Number.isNaN(Date.parse(item.createdAt)) && item.createdAt === item.updatedAt, "ISO times", item);
    await client.store.putItem([...ns, "notes"], "n1", { text: "again" }, { ttl: null });
    const again = await client.store.getItem([...ns, "notes"], "n1", { refreshTtl: false });
    expect(again.value.text === "again" && again.createdAt === item.createdAt, "overwritten, created_at kept", again);
    expect(Date.parse(again.updatedAt) > Date.parse(item.updatedAt), "a later updated_at", again);
    expect((await client.store.getItem([...ns, "notes"], "missing")) === null, "null for a missing item", null);
  });
  await check("store.searchItems", async () => {
    await client.store.putItem([...ns, "people"], "p1", { city: "Oslo", age: 30 });
    await client.store.putItem([...ns, "people"], "p2", { city: "Rome", age: 40 });
    await client.store.putItem([...ns, "people", "deep"], "p3", { city: "Oslo", age: 50 });
    const all = await client.store.searchItems(ns);
    expect(same(all.items.map((i) => i.key), ["p3", "p2", "p1", "n1"]), "newest first", all.items);
    const oslo = await client.store.searchItems([...ns, "people"], { filter: { city: "Oslo" } });
    expect(same(oslo.items.map((i) => i.key), ["p3", "p1"]), "filtered by city", oslo.items);
    const older = await client.store.searchItems(ns, { filter: { age: { $gt: 35 } }, limit: 1, offset: 1 });
    expect(same(older.items.map((i) => i.key), ["p2"]), "$gt, paged", older.items);
    expect(typeof older.items[0].createdAt === "string", "the SDK's createdAt", older.items[0]);
  });
  await check("store.listNamespaces", async () => {
    const found = await client.store.listNamespaces({ prefix: ns });
    const want = [[...ns, "notes"], [...ns, "people"], [...ns, "people", "deep"]];
    expect(same(found.namespaces, want), "every namespace under the prefix", found);
    const shallow = await client.store.listNamespaces({ prefix: ns, maxDepth: 3 });
    expect(same(shallow.namespaces, [[...ns, "notes"], [...ns, "people"]]), "cut to maxDepth, distinct", shallow);
    const deep = await client.store.listNamespaces({ suffix: ["deep"], prefix: ns });
    expect(same(deep.namespaces, [[...ns, "people", "deep"]]), "by suffix", deep);
  });
  await check("store.deleteItem", async () => {
    await client.store.deleteItem([...ns, "people", "deep"], "p3");
    expect((await client.store.getItem([...ns, "people", "deep"], "p3")) === null, "gone", null);
    const left = await client.store.listNamespaces({ prefix: ns });
    expect(same(left.namespaces, [[...ns, "notes"], [...ns, "people"]]), "its namespace no longer listed", left);
    const err = await refused(422, "a value that is no JSON object", () => client.store.putItem(ns, "bad", [1]));
    expect(/a value is a JSON object/.test(err.message), "the store's reason", err.message);
  });
}

/** client.store against a server whose store keeps no memory: refused at once, saying why. */
async function storeRefused() {
  await check("store refused without a memory store", async () => {
    for (const call of [
      () => client.store.putItem(["sdk-check"], "k", { v: 1 }),
      () => client.store.getItem(["sdk-check"], "k"),
      () => client.store.searchItems(["sdk-check"]),
    ]) {
      const err = await refused(400, "client.store on a file store", call);
      expect(/keeps no memory store/.test(err.message) && /--db app\.db/.test(err.message), "why", err.message);
    }
  });
}

/** Wait until the run (made with the "tasks" stream mode) is inside its `gate` node: past the
 * boundary of its first step, so that a cancel stops it after the gate, not before. */
async function inGate(threadId, runId) {
  const abort = new AbortController();
  for await (const event of client.runs.joinStream(threadId, runId, { signal: abort.signal })) {
    if (event.event === "tasks" && event.data?.name === "gate" && !("result" in event.data)) break;
  }
  abort.abort();
}

async function gatedChecks(gated) {
  const busy = await client.threads.create({ metadata: { suite, kind: "gated" } });
  const gid = busy.thread_id;
  gated.push(gid);
  const gateA = `gate-${randomUUID()}`;
  await ask(`HOLD ${gateA}`);
  const runA = await client.runs.create(gid, "chat", { input: user(gateA), streamMode: ["values", "tasks"] });
  await inGate(gid, runA.run_id);

  await check("multitask reject", async () => {
    expect((await client.threads.get(gid)).status === "busy", "the thread busy while its run runs", null);
    const err = await refused(409, "a second run with multitaskStrategy reject", () =>
      client.runs.create(gid, "chat", { input: user("rejected"), multitaskStrategy: "reject" }),
    );
    expect(/active|reject|busy/i.test(err.text ?? ""), "a message that says why", err.text);
  });

  await check("runs.cancel rollback, pending", async () => {
    // a run waiting behind the held one is rolled back at once (it never started)
    const queued = await client.runs.create(gid, "chat", { input: user("queued"), multitaskStrategy: "enqueue" });
    expect(queued.status === "pending", "a pending run behind the held one", queued);
    await client.runs.cancel(gid, queued.run_id, true, "rollback");
    await refused(404, "the rolled-back run is gone", () => client.runs.get(gid, queued.run_id));
  });

  await check("runs.cancel interrupt", async () => {
    await client.runs.cancel(gid, runA.run_id, false, "interrupt"); // 202: asked, the run is in the gate
    await ask(`RELEASE ${gateA}`);
    await client.runs.cancel(gid, runA.run_id, true, "interrupt"); // waits until the run has stopped
    const run = await client.runs.get(gid, runA.run_id);
    expect(run.status === "interrupted", "the cancelled run's status interrupted", run);
    const state = await client.threads.getState(gid);
    expect(lastMessage(state.values) === gateA && same(state.next, ["reply"]), "stopped before reply", state);
    const runs = await client.runs.list(gid);
    expect(same(runs.map((r) => r.run_id), [runA.run_id]), "runs.list: the held run only", runs);
  });

  await check("runs.cancel rollback, running", async () => {
    // a running run rolled back: its writes go with it
    const other = await client.threads.create({ metadata: { suite, kind: "rollback" } });
    gated.push(other.thread_id);
    await client.runs.wait(other.thread_id, "chat", { input: user("kept") });
    const before = await client.threads.getState(other.thread_id);
    const gateC = `gate-${randomUUID()}`;
    await ask(`HOLD ${gateC}`);
    const runC = await client.runs.create(other.thread_id, "chat", {
      input: user(gateC),
      streamMode: ["values", "tasks"],
    });
    await inGate(other.thread_id, runC.run_id);
    await client.runs.cancel(other.thread_id, runC.run_id, false, "rollback");
    await ask(`RELEASE ${gateC}`);
    await refused(404, "joining a rolled-back run", () => client.runs.join(other.thread_id, runC.run_id));
    const after = await client.threads.getState(other.thread_id);
    expect(after.checkpoint.checkpoint_id === before.checkpoint.checkpoint_id, "the head from before the run", after);
    expect(same(after.values, before.values), "the values from before the run", after.values);
  });
}

main().then(
  (summary) => {
    process.stdout.write(`${JSON.stringify(summary)}\n`);
    process.exit(0);
  },
  (err) => {
    const kind = err instanceof Mismatch ? "mismatch" : "error";
    process.stderr.write(`sdk_check ${kind}: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);
