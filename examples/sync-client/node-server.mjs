// automerge-repo's own sync server, set up as a user who picks it instead of ours would
// (a Repo with a NodeWSServerAdapter and a NodeFSStorageAdapter, announcing nothing to
// peers): the baseline of `cargo xtask bench --sync`'s JS clients.
//
//   node node-server.mjs --storage DIR
//
// Listens on a free loopback port and prints `listening on ws://…` as our server does.

import { parseArgs } from "node:util"

import { Repo } from "@automerge/automerge-repo"
import { NodeWSServerAdapter } from "@automerge/automerge-repo-network-websocket"
import { NodeFSStorageAdapter } from "@automerge/automerge-repo-storage-nodefs"
import { WebSocketServer } from "ws"

const { values } = parseArgs({ options: { storage: { type: "string" } } })
if (!values.storage) throw new Error("usage: node node-server.mjs --storage DIR")

const sockets = new WebSocketServer({ host: "127.0.0.1", port: 0 })
await new Promise(resolve => sockets.once("listening", resolve))
const repo = new Repo({
  network: [new NodeWSServerAdapter(sockets)],
  storage: new NodeFSStorageAdapter(values.storage),
  peerId: "node-server",
  sharePolicy: async () => false,
})
console.log(`listening on ws://127.0.0.1:${sockets.address().port}`)

process.on("SIGTERM", async () => {
  await repo.shutdown()
  process.exit(0)
})
