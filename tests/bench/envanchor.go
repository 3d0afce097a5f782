package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// The like-for-like anchors of the cross-silo Ask: a raw gRPC bidi stream
// that carries exactly the envelopes a cross-silo Ask puts on the wire, as
// PeerBatch messages on gRPC's standard protobuf codec, with the peer
// stream's fixed flow-control windows. A request envelope is kind, call id,
// view version, hops and deadline around a message of id (a UUIDv7),
// `to`, kind, 8 bytes of data and call-chain id; its answer is kind and call
// id around a message of a new id, `from`, kind, data, correlation id and
// call-chain id. The server answers each request at once, on the reader's
// goroutine: the anchors leave out everything a silo does between reading a
// request and writing its reply (routing, the call table, fencing, the turn),
// which is what the ratio against them measures.
//
//   - grpc-env: one envelope per stream message each way, every SendMsg
//     under a lock, as the 8-byte integer echo does;
//   - grpc-env-batch: the envelopes batched as the peer stream batches them
//     (envWriter): a caller that is the only one in flight, finding nothing
//     queued and no write under way, writes its request itself, and so does
//     the server for the last reply of what it read; otherwise envelopes
//     queue for a sender goroutine, which yields once when it finds nothing
//     else queued and then puts everything queued (up to 256) in one stream
//     message.
const (
	envMethodOne   = "/agentsilo.bench.Envelopes/One"
	envMethodBatch = "/agentsilo.bench.Envelopes/Batch"
	envMaxBatch    = 256     // the peer stream's MaxBatch
	envWindow      = 4 << 20 // the peer stream's fixed flow-control windows
)

var envDesc = grpc.ServiceDesc{
	ServiceName: "agentsilo.bench.Envelopes",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{
		{StreamName: "One", ServerStreams: true, ClientStreams: true, Handler: serveEnvOne},
		{StreamName: "Batch", ServerStreams: true, ClientStreams: true, Handler: serveEnvBatch},
	},
}

// envServerOptions are the options of node-b's envelope server: the peer
// server's windows.
func envServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(envWindow), grpc.InitialConnWindowSize(envWindow)}
}

// benchID is a UUIDv7-shaped id: the anchors carry ids of the length a
// silo's are, without the work of making one per call (a silo's own work).
const benchID = "0192f0c4-1a2b-7c3d-8e4f-5a6b7c8d9e0f"

// envDeadline is a request's deadline: 30 s from now, as the runtime's
// default Ask timeout sets it.
func envDeadline() int64 { return time.Now().Add(30 * time.Second).UnixMilli() }

// envReply is the answer to the request e: what a silo's reply carries.
func envReply(e *agentsilov1.PeerEnvelope) (*agentsilov1.PeerEnvelope, error) {
	m := e.GetMessage()
	if len(m.GetData()) != 8 {
		return nil, fmt.Errorf("request %d carries %d bytes of data", e.CallId, len(m.GetData()))
	}
	v := binary.LittleEndian.Uint64(m.Data)
	return &agentsilov1.PeerEnvelope{
		Kind:   agentsilov1.Kind_KIND_RESPONSE,
		CallId: e.CallId,
		Message: &agentsilov1.AgentMessage{
			Id:            benchID,
			From:          m.To,
			Kind:          agentsilov1.Kind_KIND_RESPONSE,
			Data:          binary.LittleEndian.AppendUint64(make([]byte, 0, 8), v+1),
			CorrelationId: m.Id,
			CallChainId:   m.CallChainId,
		},
	}, nil
}

// serveEnvOne answers each request in a stream message of its own.
func serveEnvOne(_ any, s grpc.ServerStream) error {
	var b agentsilov1.PeerBatch
	for {
		if err := s.RecvMsg(&b); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		for _, e := range b.Envelopes {
			r, err := envReply(e)
			if err != nil {
				return err
			}
			if err := s.SendMsg(&agentsilov1.PeerBatch{Envelopes: []*agentsilov1.PeerEnvelope{r}}); err != nil {
				return err
			}
		}
	}
}

// serveEnvBatch answers as an inbound peer stream does: a reader counts the
// requests of what it read as served, answers each, and writes the last
// answer itself if nothing is queued; the handler's goroutine sends what
// queues, in batches.
func serveEnvBatch(_ any, s grpc.ServerStream) error {
	w := newEnvWriter(s.SendMsg)
	var serving atomic.Int64
	rdone := make(chan error, 1)
	go func() {
		var b agentsilov1.PeerBatch
		for {
			if err := s.RecvMsg(&b); err != nil {
				rdone <- err
				return
			}
			serving.Add(int64(len(b.Envelopes)))
			for _, e := range b.Envelopes {
				r, err := envReply(e)
				if err != nil {
					rdone <- err
					return
				}
				if serving.Add(-1) == 0 && w.direct(r) {
					continue
				}
				w.enqueue(r)
			}
		}
	}()
	err := w.run(rdone)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// envWriter writes envelopes to a stream as the peer transport's writer
// and batcher do (internal/transport/batch.go).
type envWriter struct {
	mu     sync.Mutex // held while writing
	send   func(any) error
	queued atomic.Int64 // envelopes queued or held by run, not yet written
	q      chan *agentsilov1.PeerEnvelope
	one    agentsilov1.PeerBatch // guarded by mu
	failed atomic.Bool
}

func newEnvWriter(send func(any) error) *envWriter {
	return &envWriter{send: send, q: make(chan *agentsilov1.PeerEnvelope, 10000)}
}

// direct writes e on the calling goroutine if nothing is queued and no one
// is writing, and reports whether it did.
func (w *envWriter) direct(e *agentsilov1.PeerEnvelope) bool {
	if !w.mu.TryLock() {
		return false
	}
	defer w.mu.Unlock()
	if !w.queued.CompareAndSwap(0, 1) {
		return false
	}
	defer w.queued.Add(-1)
	w.one.Envelopes = append(w.one.Envelopes[:0], e)
	if err := w.send(&w.one); err != nil {
		w.failed.Store(true)
	}
	w.one.Envelopes[0] = nil
	return true
}

func (w *envWriter) enqueue(e *agentsilov1.PeerEnvelope) {
	w.queued.Add(1)
	w.q <- e
}

// run sends what queues, in batches, until done yields (its error is
// returned) or a write fails.
func (w *envWriter) run(done <-chan error) error {
	var b agentsilov1.PeerBatch
	for {
		var e *agentsilov1.PeerEnvelope
		select {
		case e = <-w.q:
		case err := <-done:
			return err
		}
		w.mu.Lock()
		b.Envelopes = append(b.Envelopes[:0], e)
		if len(w.q) == 0 {
			runtime.Gosched()
		}
	fill:
		for len(b.Envelopes) < envMaxBatch {
			select {
			case e := <-w.q:
				b.Envelopes = append(b.Envelopes, e)
			default:
				break fill
			}
		}
		err := w.send(&b)
		w.queued.Add(-int64(len(b.Envelopes)))
		clear(b.Envelopes)
		w.mu.Unlock()
		if err != nil || w.failed.Load() {
			if err == nil {
				err = errors.New("a direct write failed")
			}
			return err
		}
	}
}

// envClient is one anchor stream shared by the callers; a reader hands
// each answer to the caller whose index rides in the call id's high 32
// bits.
type envClient struct {
	conn    *grpc.ClientConn
	stream  grpc.ClientStream
	batched bool
	sendMu  sync.Mutex    // grpc-env: one SendMsg at a time
	w       *envWriter    // grpc-env-batch
	asking  atomic.Int64  // grpc-env-batch: calls under way
	wdone   chan error    // ends w.run
	wended  chan struct{} // closed when w.run returned
	mu      sync.Mutex
	waiters map[uint64]chan *agentsilov1.PeerEnvelope
	done    chan struct{}
}

func dialEnv(ctx context.Context, addr string, batched bool) (*envClient, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(envWindow), grpc.WithInitialConnWindowSize(envWindow))
	if err != nil {
		return nil, err
	}
	desc, method := &envDesc.Streams[0], envMethodOne
	if batched {
		desc, method = &envDesc.Streams[1], envMethodBatch
	}
	st, err := conn.NewStream(ctx, desc, method)
	if err != nil {
		conn.Close()
		return nil, err
	}
	c := &envClient{conn: conn, stream: st, batched: batched, waiters: make(map[uint64]chan *agentsilov1.PeerEnvelope), done: make(chan struct{})}
	if batched {
		c.w, c.wdone, c.wended = newEnvWriter(st.SendMsg), make(chan error, 1), make(chan struct{})
		go func() {
			defer close(c.wended)
			_ = c.w.run(c.wdone)
		}()
	}
	go c.read()
	return c, nil
}

func (c *envClient) read() {
	defer close(c.done)
	var b agentsilov1.PeerBatch
	for {
		if err := c.stream.RecvMsg(&b); err != nil {
			return
		}
		for _, e := range b.Envelopes {
			c.mu.Lock()
			ch := c.waiters[e.CallId>>32]
			c.mu.Unlock()
			if ch != nil {
				ch <- e
			}
		}
	}
}

func (c *envClient) close() {
	c.conn.Close()
	<-c.done
	if c.w != nil {
		c.wdone <- nil
		<-c.wended
	}
}

// caller returns the call function of caller w: one request envelope out,
// its answer back.
func (c *envClient) caller(to []string, n int) func(w int) callFunc {
	return func(w int) callFunc {
		ch := make(chan *agentsilov1.PeerEnvelope, 1)
		c.mu.Lock()
		c.waiters[uint64(w)] = ch
		c.mu.Unlock()
		next := cursor(w, n, len(to))
		var seq uint64
		return func() error {
			seq = (seq + 1) & 0xffffffff
			v := uint64(w)<<32 | seq
			e := &agentsilov1.PeerEnvelope{
				Kind:           agentsilov1.Kind_KIND_REQUEST,
				CallId:         v,
				ViewVersion:    3,
				Hops:           1,
				DeadlineUnixMs: envDeadline(),
				Message: &agentsilov1.AgentMessage{
					Id:          benchID,
					To:          to[next()],
					Kind:        agentsilov1.Kind_KIND_REQUEST,
					Data:        binary.LittleEndian.AppendUint64(make([]byte, 0, 8), v),
					CallChainId: benchID,
				},
			}
			if c.batched {
				// Counted until the answer, as the transport counts an Ask.
				c.asking.Add(1)
				defer c.asking.Add(-1)
			}
			if err := c.send(e); err != nil {
				return err
			}
			select {
			case r := <-ch:
				if r.CallId != v || len(r.GetMessage().GetData()) != 8 || binary.LittleEndian.Uint64(r.Message.Data) != v+1 {
					return fmt.Errorf("envelope stream answered %v to %d", r, v)
				}
				return nil
			case <-c.done:
				return errors.New("envelope stream closed")
			}
		}
	}
}

func (c *envClient) send(e *agentsilov1.PeerEnvelope) error {
	if !c.batched {
		c.sendMu.Lock()
		defer c.sendMu.Unlock()
		return c.stream.SendMsg(&agentsilov1.PeerBatch{Envelopes: []*agentsilov1.PeerEnvelope{e}})
	}
	if c.asking.Load() == 1 && c.w.direct(e) {
		return nil
	}
	c.w.enqueue(e)
	return nil
}
