// Package audit keeps the cluster's audit log: an append-only record of
// every side-effecting action (model agents' tool calls, A2A tasks and MCP
// tool calls served, calls to outside agents and MCP servers, approvals and
// their decisions, ACL and definition changes, deletions of conversations
// and state).
//
// Records go to partitions (a bucket of the agent's address), and the
// records of a partition form a chain: each holds the hash of the one
// before it and its own, SHA-256 over a canonical encoding (Record.Sum).
// The partition's head (its last sequence number and hash) lives in the
// store beside the records, and an append moves it with a compare-and-swap
// (an etcd transaction on the head's revision, a PostgreSQL transaction
// holding the head's row), so that a chain never forks however many silos
// append at once. Changing, removing or inserting a record breaks its
// chain, and Verify names the first record that does not match.
//
// Each record has a key, unique in the whole log: the append of a record
// whose key is there already writes nothing. Emitters key a record by what
// made it happen (a model agent's tool call by its agent, turn, round and
// call id; an A2A task by its id), so that the same side effect replayed
// after a crash is recorded once.
//
// Two stores: Etcd (the silo's etcd, the default) and Postgres (a table in
// PostgreSQL). Retention (Sweep) removes a partition's oldest records and
// keeps the hash of the last one it removed as the chain's anchor, so the
// records left still verify.
//
// See docs/audit.md.
package audit
