package clock

// Slot is where a silo puts its clock (a fake one in its tests) in the
// Config of a public package that does not show one: directory.Config and
// reminders.Config embed a Slot under an unexported name, so that users see
// only their settings and cannot reach it, while the silo and the packages'
// tests set it with Wire. The package takes it with Wired where it fills
// in its defaults. The zero Slot holds no clock (the package's default:
// the real one).
type Slot struct{ clk Clock }

// clockSlot is promoted to the Configs that embed a Slot: it makes them
// Slotted, which no type of another package can be otherwise.
func (s *Slot) clockSlot() *Slot { return s }

// Slotted is a pointer to a Config that embeds a Slot (*directory.Config,
// *reminders.Config), or to the Slot itself.
type Slotted interface{ clockSlot() *Slot }

// Wire puts clk in cfg's Slot.
func Wire(cfg Slotted, clk Clock) { cfg.clockSlot().clk = clk }

// Wired returns the clock Wire put in cfg's Slot, nil if none.
func Wired(cfg Slotted) Clock { return cfg.clockSlot().clk }
