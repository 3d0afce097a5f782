// Package llm makes agents that think with a language model: a model
// agent type is declared by a Definition (the model, a system prompt,
// tools and limits) and registered like any type:
//
//	def, err := llm.ParseDefinition(yamlBytes)
//	...
//	err = llm.Register(reg, def)
//
// Each request to an agent of the type (its text) starts a turn: the loop
// sends the conversation and the tools' JSON Schemas to the model, runs
// the tool calls it asks for (several of one step concurrently), gives it
// the results, and repeats until the model answers or a limit ends the
// turn (Limits: rounds, output tokens, time). Tools are the typed skills
// of other agent types (Asks made from the turn, so on behalf of the
// principal who started it, with the call chain's access control), the
// service directory and the working memory.
//
// The loop is durable: every model response, tool call and tool result
// is recorded in the agent's state (grain.Host.SaveState: etcd or
// PostgreSQL, with etags) before the next step. An activation that dies
// mid-turn is activated again, by the reminder the turn registered or by
// its caller's retry, and the turn resumes from its last recorded step: a
// recorded response is never asked for again, and a tool call's Ask
// carries the idempotency key <turn>/<round>/<call>, so that a callee
// that saves state applies it once. Answers are recorded by the request's
// idempotency key: a retried request gets the one answer. The
// conversation skill returns the record (Conversation); the forget skill
// deletes it.
//
// A conversation lasts: it is the agent's record, continued by the next
// turn wherever the agent is activated. Each A2A context (and each MCP
// session that asks) is a conversation of its own, kept by the agent of
// that context (ConversationSettings.Key, grain.ContextAddress). Older
// turns are dropped, or summarised by the model, to keep each request
// within a token budget (ConversationSettings.MaxTokens, Trim), and idle
// conversations expire (Retention). client.Conversations lists an owner's
// and deletes them.
//
// Models are reached through their official SDKs (openai-go for any
// OpenAI-compatible chat completions API, anthropic-sdk-go for
// Anthropic's Messages API), which retry 429s and 5xx honouring
// Retry-After; see Provider and ModelError for the errors' codes. Each
// model call and tool call has an OpenTelemetry span with the GenAI
// semantic conventions' attributes. docs/models.md is the guide.
package llm
