//go:build agentsilo_testhooks

package main

import (
	"context"
	"strings"

	"github.com/agentsilo/agentsilo/grain"
)

// LabelProbeType is a test agent type, registered with the hidden
// --journal flag, for the tests of content labels (docs/trust.md): it
// says which label the message it handles carries, and asks another
// agent on the way if told to. Its one skill, probe:
//
//	via ADDR  asks ADDR "probe" (a message it gives no label: the
//	          runtime's) and replies "<alias>@<silo> got <label>[ outside]
//	          | <ADDR's reply> (reply <label>[ outside])"
//	anything  replies "<alias>@<silo> got <label>[ outside]"
//
// Its replies carry no label of their own either: the runtime's.
const LabelProbeType = "LabelProbe"

type labelProbe struct{ h grain.Host }

func registerLabelProbe(reg *grain.Registry) error {
	return reg.Register(LabelProbeType, func(h grain.Host) (grain.Agent, error) { return labelProbe{h}, nil }, grain.TypeInfo{
		Description: "Says which content label the message it handles carries (a test agent).",
		Skills:      []grain.Skill{{Name: "probe", Description: "reply with the message's label; via ADDR: ask ADDR on the way"}},
	})
}

// said is how a message's label reads in the probe's replies.
func said(m *grain.Message) string {
	s := m.Label.Name()
	if s == "" {
		s = "no-label"
	}
	if m.Outside {
		s += " outside"
	}
	return s
}

func (p labelProbe) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	r := m.Response()
	r.Message = p.h.Address().Alias + "@" + p.h.Silo() + " got " + said(m)
	if to, ok := strings.CutPrefix(strings.TrimSpace(m.Message), "via "); ok {
		got, err := p.h.Ask(ctx, strings.TrimSpace(to), &grain.Message{MessageType: "probe", Message: "probe"})
		if err != nil {
			return nil, err
		}
		r.Message += " | " + got.Message + " (reply " + said(got) + ")"
	}
	return r, nil
}
