// Package dashboard is the silo's web dashboard, served under /ui on the
// silo's HTTP port: the cluster's members and charts of every silo's load
// (published through etcd while watched, load.go), agents, reminders,
// topics with their dead letters, A2A tasks, the service directory, the
// silo's MCP sessions and tools, the model agents with their
// conversations and token use (models.go), and the ACL with an explain
// box.
//
// It shows what the gateway answers the principal who logged in: every
// read and action is a call to the silo's own gateway carrying that
// principal's API key, so the ACL decides what each one sees and may do
// exactly as it does for the CLI. Pages are Go templates rendered on the
// server; htmx (polling) keeps them live and uPlot draws the charts, both
// vendored under assets/vendor and embedded, so the silo needs no build
// step and the browser loads nothing from elsewhere.
//
// Actions are POSTs that carry the session's CSRF token, come from the
// dashboard's own origin, and ask the browser for confirmation first. The
// pages are served with a Content-Security-Policy that runs no script but
// the dashboard's own files, and templates escape whatever the cluster
// holds (messages, configuration values, names).
package dashboard
