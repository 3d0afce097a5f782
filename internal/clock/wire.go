package clock

// The hooks by which a silo sets its clock (a fake one in its tests) on
// the configs of the public packages whose Config does not show a clock,
// so that users see only their settings. Each package sets its hook at
// init; the silo and the packages' tests call it.
var (
	// WireDirectory sets clk on cfg, a *directory.Config.
	WireDirectory func(cfg any, clk Clock)
	// WireReminders sets clk on cfg, a *reminders.Config.
	WireReminders func(cfg any, clk Clock)
)
