package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// Close shuts the silo down gracefully: the gateway stops taking new work
// and waits for the calls in flight, every activation is deactivated (running
// OnDeactivate), then the servers stop. If ctx ends first, what is left is cut
// short and Close returns the context's error. The silo's metrics leave
// its registry (SiloConfig.Metrics) last.
func (s *Silo) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.cfg.ShutdownTimeout)
			defer cancel()
		}
		s.closeErr = s.shutdown(ctx)
	})
	return s.closeErr
}

func (s *Silo) shutdown(ctx context.Context) error {
	var errsOut []error
	// Hand the agents over: from the view in which the record is marked
	// leaving, every silo routes this silo's addresses to their new owners,
	// which ask this silo to release each one before activating it.
	fenced, joined := false, s.joined
	if s.members != nil {
		select {
		case <-s.members.Fenced():
			fenced = true
		default:
		}
	}
	if s.gw != nil {
		s.gw.SetServing(false)
	}
	// Cut off from etcd, the silo cannot leave: it stops without, and the
	// others take its agents over once its lease expires.
	leave := joined && !fenced && !s.cutOff()
	if leave {
		if err := s.members.MarkLeaving(ctx); err != nil {
			errsOut = append(errsOut, fmt.Errorf("membership: %w", err))
		}
	}
	if s.gw != nil {
		drained := make(chan struct{})
		go func() {
			s.gw.GracefulStop()
			close(drained)
		}()
		select {
		case <-drained:
		case <-ctx.Done():
			s.gw.Stop()
			<-drained
			errsOut = append(errsOut, fmt.Errorf("gateway drain: %w", ctx.Err()))
		}
	}
	if s.a2a != nil {
		// Its turns run in the runtime: before the runtime closes.
		if err := s.a2a.Close(ctx); err != nil {
			errsOut = append(errsOut, err)
		}
	}
	if s.mcp != nil {
		// Its calls run in the runtime: before the runtime closes.
		if err := s.mcp.Close(ctx); err != nil {
			errsOut = append(errsOut, err)
		}
	}
	if d := s.Directory(); d != nil {
		d.Close()
	}
	s.declared.close()
	if s.acl != nil {
		s.acl.Close()
	}
	if s.reminders != nil {
		if leave {
			s.handOverReminders(ctx)
		}
		if err := s.reminders.Close(); err != nil {
			errsOut = append(errsOut, fmt.Errorf("reminders: %w", err))
		}
	}
	if s.topics != nil {
		if err := s.topics.Close(ctx); err != nil {
			errsOut = append(errsOut, fmt.Errorf("topics: %w", err))
		}
	}
	if s.topicJS != nil {
		s.topicJS.Close()
	}
	if s.rt != nil {
		if err := s.rt.Close(ctx); err != nil {
			errsOut = append(errsOut, err)
		}
	}
	if s.state != nil {
		if err := s.state.Close(); err != nil {
			errsOut = append(errsOut, fmt.Errorf("state store: %w", err))
		}
	}
	if s.auditStop != nil {
		s.auditStop()
	}
	s.audit.Wait() // the records of the last A2A tasks and MCP calls
	if s.auditSt != nil {
		if err := s.auditSt.Close(); err != nil {
			errsOut = append(errsOut, fmt.Errorf("audit store: %w", err))
		}
	}
	close(s.stopc)
	if s.members != nil {
		if leave {
			if err := s.members.Leave(ctx); err != nil {
				errsOut = append(errsOut, fmt.Errorf("membership: %w", err))
			}
		}
		s.members.Close()
	}
	if s.views != nil {
		s.views.stop()
	}
	if s.sessions != nil {
		s.sessions.stop()
	}
	if s.peerSrv != nil {
		s.peerSrv.Stop()
	}
	if s.tp != nil {
		s.tp.Close()
	}
	if s.sessions != nil {
		s.sessions.wait() // the pushes peers sent, handed on
	}
	if s.http != nil {
		if err := s.http.Shutdown(ctx); err != nil {
			s.http.Close()
		}
	}
	s.serving.Wait()
	if s.etcd != nil {
		if err := s.etcd.Close(); err != nil {
			errsOut = append(errsOut, fmt.Errorf("etcd: %w", err))
		}
	}
	// The registry may serve the next silo of a program (after a fence).
	s.collectors.unregisterAll()
	return errors.Join(errsOut...)
}

// abort undoes a failed Start.
func (s *Silo) abort() {
	for _, l := range []net.Listener{s.gwLis, s.httpLis, s.peerLis, s.a2aLis, s.mcpLis} {
		if l != nil {
			l.Close()
		}
	}
	s.Close(context.Background())
}
