package transport

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
)

// peerCodec is the gRPC codec of the peer streams. It writes and reads the
// protobuf wire format, as gRPC's own codec does, and says "proto" on the
// wire: a silo that uses gRPC's codec reads what this one writes, and the
// other way round (a rolling upgrade mixes them). What it changes is the
// cost of a PeerBatch, the one message of the streams:
//
//   - Marshal writes the envelopes and the common fields of their messages
//     by hand, in one pass after a size pass, where the generic codec walks
//     each message's reflection tables twice;
//   - Unmarshal makes each envelope and its message in one allocation, and
//     the string fields of a message in one more (substrings of one string),
//     where the generic codec allocates each separately.
//
// Anything else (a hello, a status, an AgentMessage's state map or deadline,
// a field this version does not know) goes through the protobuf runtime, and
// a batch the fast path cannot read is read again by proto.Unmarshal, which
// decides: what Unmarshal returns is always what proto.Unmarshal would
// (FuzzPeerCodec checks this against it). The hand-written lists of fields
// below must name every field of PeerBatch, PeerEnvelope and AgentMessage:
// TestPeerCodecEveryField walks their descriptors and fails on a field the
// fast path does not write and read. Unlike proto.Marshal, Marshal does
// not check that strings are UTF-8 (see messageSize); Unmarshal does, as
// proto.Unmarshal.
type peerCodec struct{}

var protoCodec = encoding.GetCodecV2("proto")

func (peerCodec) Name() string { return "proto" }

func (peerCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*agentsilov1.PeerBatch)
	if !ok {
		return protoCodec.Marshal(v)
	}
	var stack [64]int
	size, sizes, err := batchSize(b, stack[:0])
	if err != nil {
		return nil, err
	}
	// Even a small batch is written into a pooled buffer (gRPC frees it once
	// written): gRPC's codec allocates a small message's bytes, and then the
	// Buffer holding them, afresh each time.
	pool := mem.DefaultBufferPool()
	buf := pool.Get(max(size, minPooled))
	out, err := appendBatch((*buf)[:0], b, sizes)
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (peerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*agentsilov1.PeerBatch)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return unmarshalBatch(buf.ReadOnlyData(), b)
}

// Field numbers of peer.proto and message.proto.
const (
	fBatchHello     = 1
	fBatchEnvelopes = 2

	fEnvKind     = 1
	fEnvCallID   = 2
	fEnvMessage  = 3
	fEnvView     = 4
	fEnvHops     = 5
	fEnvDeadline = 6
	fEnvError    = 7
	fEnvCancel   = 8
	fEnvNotRun   = 9

	fMsgKind    = 8
	fMsgData    = 10
	fMsgFiles   = 11
	fMsgAttempt = 16
	fMsgLabel   = 21
	fMsgOutside = 22
)

// varintField reports whether num is a varint field of AgentMessage.
func varintField(num protowire.Number) bool {
	return num == fMsgKind || num == fMsgAttempt || num == fMsgLabel || num == fMsgOutside
}

// setVarint sets the varint field num of m to x.
func setVarint(m *agentsilov1.AgentMessage, num protowire.Number, x uint64) {
	switch num {
	case fMsgKind:
		m.Kind = agentsilov1.Kind(int32(x))
	case fMsgAttempt:
		m.Attempt = uint32(x)
	case fMsgLabel:
		m.Label = agentsilov1.ContentLabel(int32(x))
	case fMsgOutside:
		m.Outside = x != 0
	}
}

func boolVarint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// stringField returns the singular string field num of m, nil if num is
// not one.
func stringField(m *agentsilov1.AgentMessage, num protowire.Number) *string {
	switch num {
	case 1:
		return &m.Id
	case 2:
		return &m.To
	case 3:
		return &m.From
	case 4:
		return &m.OnBehalfOf
	case 5:
		return &m.Channel
	case 6:
		return &m.MessageType
	case 7:
		return &m.Message
	case 9:
		return &m.DataType
	case 13:
		return &m.CorrelationId
	case 14:
		return &m.Traceparent
	case 17:
		return &m.CallChainId
	case 18:
		return &m.Topic
	case 19:
		return &m.Subscription
	case 20:
		return &m.IdempotencyKey
	}
	return nil
}

var errInvalidUTF8 = errors.New("proto: string field contains invalid UTF-8")

// simple reports whether m has only the fields the codec writes by hand.
func simple(m *agentsilov1.AgentMessage) bool {
	return len(m.State) == 0 && m.Deadline == nil && len(m.ProtoReflect().GetUnknown()) == 0
}

func stringSize(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func varintSize(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

// messageSize is the encoded size of m. It does not check that m's strings
// are UTF-8, as proto.Marshal would: the transport checks each message
// (protocol.CheckMessage) before it joins a batch, so that a bad one fails
// alone, not the batch.
func messageSize(m *agentsilov1.AgentMessage) int {
	if !simple(m) {
		return proto.Size(m)
	}
	n := stringSize(1, m.Id) + stringSize(2, m.To) + stringSize(3, m.From) +
		stringSize(4, m.OnBehalfOf) + stringSize(5, m.Channel) + stringSize(6, m.MessageType) +
		stringSize(7, m.Message) + stringSize(9, m.DataType) + stringSize(13, m.CorrelationId) +
		stringSize(14, m.Traceparent) + stringSize(17, m.CallChainId) + stringSize(18, m.Topic) +
		stringSize(19, m.Subscription) + stringSize(20, m.IdempotencyKey)
	for _, f := range m.Files {
		n += protowire.SizeTag(fMsgFiles) + protowire.SizeBytes(len(f))
	}
	if len(m.Data) > 0 {
		n += protowire.SizeTag(fMsgData) + protowire.SizeBytes(len(m.Data))
	}
	n += varintSize(fMsgKind, uint64(m.Kind))
	n += varintSize(fMsgAttempt, uint64(m.Attempt))
	n += varintSize(fMsgLabel, uint64(m.Label))
	n += varintSize(fMsgOutside, boolVarint(m.Outside))
	return n
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// appendProto appends the field num holding m, through the protobuf runtime.
func appendProto(b []byte, num protowire.Number, m proto.Message) ([]byte, error) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(proto.Size(m)))
	return proto.MarshalOptions{}.MarshalAppend(b, m)
}

// appendMessage appends the fields of m.
func appendMessage(b []byte, m *agentsilov1.AgentMessage) ([]byte, error) {
	if !simple(m) {
		return proto.MarshalOptions{}.MarshalAppend(b, m)
	}
	b = appendStringField(b, 1, m.Id)
	b = appendStringField(b, 2, m.To)
	b = appendStringField(b, 3, m.From)
	b = appendStringField(b, 4, m.OnBehalfOf)
	b = appendStringField(b, 5, m.Channel)
	b = appendStringField(b, 6, m.MessageType)
	b = appendStringField(b, 7, m.Message)
	b = appendStringField(b, 9, m.DataType)
	b = appendStringField(b, 13, m.CorrelationId)
	b = appendStringField(b, 14, m.Traceparent)
	b = appendStringField(b, 17, m.CallChainId)
	b = appendStringField(b, 18, m.Topic)
	b = appendStringField(b, 19, m.Subscription)
	b = appendStringField(b, 20, m.IdempotencyKey)
	b = appendVarintField(b, fMsgKind, uint64(m.Kind))
	b = appendBytesField(b, fMsgData, m.Data)
	for _, f := range m.Files {
		b = protowire.AppendTag(b, fMsgFiles, protowire.BytesType)
		b = protowire.AppendString(b, f)
	}
	b = appendVarintField(b, fMsgAttempt, uint64(m.Attempt))
	b = appendVarintField(b, fMsgLabel, uint64(m.Label))
	return appendVarintField(b, fMsgOutside, boolVarint(m.Outside)), nil
}

// envelopeSize is the encoded size of e, and its message's.
func envelopeSize(e *Envelope) (n, ms int) {
	n = varintSize(fEnvKind, uint64(e.Kind))
	n += varintSize(fEnvCallID, e.CallId)
	if e.Message != nil {
		ms = messageSize(e.Message)
		n += protowire.SizeTag(fEnvMessage) + protowire.SizeBytes(ms)
	}
	n += varintSize(fEnvView, uint64(e.ViewVersion))
	n += varintSize(fEnvHops, uint64(e.Hops))
	n += varintSize(fEnvDeadline, uint64(e.DeadlineUnixMs))
	if e.Error != nil {
		n += protowire.SizeTag(fEnvError) + protowire.SizeBytes(proto.Size(e.Error))
	}
	if e.Cancel {
		n += protowire.SizeTag(fEnvCancel) + 1
	}
	if e.NotRun {
		n += protowire.SizeTag(fEnvNotRun) + 1
	}
	return n + len(e.ProtoReflect().GetUnknown()), ms
}

// appendEnvelope appends e, whose message's size is ms.
func appendEnvelope(b []byte, e *Envelope, ms int) ([]byte, error) {
	b = appendVarintField(b, fEnvKind, uint64(e.Kind))
	b = appendVarintField(b, fEnvCallID, e.CallId)
	var err error
	if e.Message != nil {
		b = protowire.AppendTag(b, fEnvMessage, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(ms))
		if b, err = appendMessage(b, e.Message); err != nil {
			return nil, err
		}
	}
	b = appendVarintField(b, fEnvView, uint64(e.ViewVersion))
	b = appendVarintField(b, fEnvHops, uint64(e.Hops))
	b = appendVarintField(b, fEnvDeadline, uint64(e.DeadlineUnixMs))
	if e.Error != nil {
		if b, err = appendProto(b, fEnvError, e.Error); err != nil {
			return nil, err
		}
	}
	if e.Cancel {
		b = appendVarintField(b, fEnvCancel, 1)
	}
	if e.NotRun {
		b = appendVarintField(b, fEnvNotRun, 1)
	}
	return append(b, e.ProtoReflect().GetUnknown()...), nil
}

// batchSize is the encoded size of pb. It appends each envelope's size and
// its message's to sizes, for appendBatch.
func batchSize(pb *agentsilov1.PeerBatch, sizes []int) (int, []int, error) {
	n := 0
	if pb.Hello != nil {
		n += protowire.SizeTag(fBatchHello) + protowire.SizeBytes(proto.Size(pb.Hello))
	}
	for _, e := range pb.Envelopes {
		if e == nil {
			return 0, nil, errors.New("proto: repeated field envelopes has a nil element")
		}
		en, ms := envelopeSize(e)
		sizes = append(sizes, en, ms)
		n += protowire.SizeTag(fBatchEnvelopes) + protowire.SizeBytes(en)
	}
	return n + len(pb.ProtoReflect().GetUnknown()), sizes, nil
}

// appendBatch appends pb, with the sizes batchSize found.
func appendBatch(b []byte, pb *agentsilov1.PeerBatch, sizes []int) ([]byte, error) {
	var err error
	if pb.Hello != nil {
		if b, err = appendProto(b, fBatchHello, pb.Hello); err != nil {
			return nil, err
		}
	}
	for i, e := range pb.Envelopes {
		b = protowire.AppendTag(b, fBatchEnvelopes, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizes[2*i]))
		if b, err = appendEnvelope(b, e, sizes[2*i+1]); err != nil {
			return nil, err
		}
	}
	return append(b, pb.ProtoReflect().GetUnknown()...), nil
}

// minPooled is the smallest buffer that mem.NewBuffer pools.
var minPooled = func() int {
	n := 1
	for mem.IsBelowBufferPoolingThreshold(n) {
		n *= 2
	}
	return n
}()

// errSlow sends a batch the fast path does not read to proto.Unmarshal.
var errSlow = errors.New("not for the fast path")

// MaxReceivedBatch bounds the envelopes one received stream message may
// carry: a stream message carrying more is refused, and its stream ends.
// Silos send at most Config.MaxBatch (at most this) in one. Without the
// bound, a 4 MiB stream message of empty envelopes (2 bytes each on the
// wire) would decode into two million envelopes, about 900 MB.
const MaxReceivedBatch = 4096

var errBatchTooLarge = fmt.Errorf("transport: a stream message carries more than %d envelopes", MaxReceivedBatch)

// unmarshalBatch reads buf into pb as proto.Unmarshal would, but refuses a
// batch of more than MaxReceivedBatch envelopes before decoding them.
func unmarshalBatch(buf []byte, pb *agentsilov1.PeerBatch) error {
	// A batch read into again keeps its slice of envelopes (not what they
	// pointed to).
	envs := pb.Envelopes
	clear(envs)
	proto.Reset(pb)
	pb.Envelopes = envs[:0]
	err := fastBatch(buf, pb)
	if err == nil || err == errBatchTooLarge {
		return err
	}
	proto.Reset(pb)
	if countEnvelopes(buf) > MaxReceivedBatch {
		return errBatchTooLarge
	}
	return proto.Unmarshal(buf, pb)
}

// countEnvelopes counts the envelope fields of the batch in buf without
// decoding them; it stops counting at what it cannot parse (proto.Unmarshal
// then fails on it).
func countEnvelopes(buf []byte) int {
	count := 0
	for len(buf) > 0 {
		num, typ, n := protowire.ConsumeTag(buf)
		if n < 0 {
			return count
		}
		buf = buf[n:]
		n = protowire.ConsumeFieldValue(num, typ, buf)
		if n < 0 {
			return count
		}
		buf = buf[n:]
		if num == fBatchEnvelopes && typ == protowire.BytesType {
			count++
		}
	}
	return count
}

// fastBatch reads buf into the empty pb, or fails with errSlow (or a parse
// error) for anything it leaves to proto.Unmarshal: fields it does not know,
// repeated singular messages (which proto merges), a wire type that does not
// match the field's.
func fastBatch(buf []byte, pb *agentsilov1.PeerBatch) error {
	for len(buf) > 0 {
		num, typ, n := protowire.ConsumeTag(buf)
		if n < 0 || typ != protowire.BytesType {
			return errSlow
		}
		buf = buf[n:]
		v, n := protowire.ConsumeBytes(buf)
		if n < 0 {
			return errSlow
		}
		buf = buf[n:]
		switch num {
		case fBatchHello:
			if pb.Hello != nil {
				return errSlow
			}
			pb.Hello = new(agentsilov1.PeerHello)
			if err := proto.Unmarshal(v, pb.Hello); err != nil {
				return err
			}
		case fBatchEnvelopes:
			if len(pb.Envelopes) == MaxReceivedBatch {
				return errBatchTooLarge
			}
			e, err := fastEnvelope(v)
			if err != nil {
				return err
			}
			pb.Envelopes = append(pb.Envelopes, e)
		default:
			return errSlow
		}
	}
	return nil
}

// envelopeAndMessage puts an envelope and its message in one allocation.
type envelopeAndMessage struct {
	env Envelope
	msg agentsilov1.AgentMessage
}

func consumeVarintField(buf []byte, typ protowire.Type) (uint64, int) {
	if typ != protowire.VarintType {
		return 0, -1
	}
	return protowire.ConsumeVarint(buf)
}

func fastEnvelope(buf []byte) (*Envelope, error) {
	var (
		kind, callID, view, hops, deadline, cancel, notRun uint64
		status                                             *agentsilov1.Status
		msg                                                []byte
		hasMsg                                             bool
	)
	for len(buf) > 0 {
		num, typ, n := protowire.ConsumeTag(buf)
		if n < 0 {
			return nil, errSlow
		}
		buf = buf[n:]
		if num == fEnvMessage || num == fEnvError {
			if typ != protowire.BytesType {
				return nil, errSlow
			}
			v, n := protowire.ConsumeBytes(buf)
			if n < 0 {
				return nil, errSlow
			}
			buf = buf[n:]
			if num == fEnvError {
				if status != nil {
					return nil, errSlow // proto merges repeats
				}
				status = new(agentsilov1.Status)
				if err := proto.Unmarshal(v, status); err != nil {
					return nil, err
				}
			} else {
				if hasMsg {
					return nil, errSlow
				}
				msg, hasMsg = v, true
			}
			continue
		}
		x, n := consumeVarintField(buf, typ)
		if n < 0 {
			return nil, errSlow
		}
		buf = buf[n:]
		switch num {
		case fEnvKind:
			kind = x
		case fEnvCallID:
			callID = x
		case fEnvView:
			view = x
		case fEnvHops:
			hops = x
		case fEnvDeadline:
			deadline = x
		case fEnvCancel:
			cancel = x
		case fEnvNotRun:
			notRun = x
		default:
			return nil, errSlow
		}
	}
	var e *Envelope
	if hasMsg {
		pair := new(envelopeAndMessage)
		if err := fastMessage(msg, &pair.msg); err != nil {
			return nil, err
		}
		e = &pair.env
		e.Message = &pair.msg
	} else {
		e = new(Envelope)
	}
	e.Kind, e.CallId, e.ViewVersion, e.Hops = agentsilov1.Kind(int32(kind)), callID, int64(view), uint32(hops)
	e.DeadlineUnixMs, e.Error, e.Cancel, e.NotRun = int64(deadline), status, cancel != 0, notRun != 0
	return e, nil
}

// smallMessage is the size up to which fastMessage copies a message's wire
// bytes whole, in one pass: its strings are substrings of the copy, which
// holds its tags and data too (at most this many bytes kept that a two-pass
// read would not keep).
const smallMessage = 512

// fastMessage reads buf into the empty m. Its singular strings (and files)
// share one allocation.
func fastMessage(buf []byte, m *agentsilov1.AgentMessage) error {
	if len(buf) <= smallMessage {
		return fastSmallMessage(buf, m)
	}
	return fastLargeMessage(buf, m)
}

// fastSmallMessage is fastMessage in one pass: buf is copied once, the
// string fields are substrings of the copy and the data a slice of it
// (whose capacity ends with it, so an append to it copies; its bytes are
// no string's). One allocation for all of them.
func fastSmallMessage(buf []byte, m *agentsilov1.AgentMessage) error {
	raw := append(make([]byte, 0, len(buf)), buf...)
	// Read-only but for the data's bytes, which no string shares.
	all := unsafe.String(unsafe.SliceData(raw), len(raw))
	var seen uint32 // the singular string fields read
	for pos := 0; pos < len(buf); {
		num, typ, n := protowire.ConsumeTag(buf[pos:])
		if n < 0 {
			return errSlow
		}
		pos += n
		if varintField(num) {
			x, n := consumeVarintField(buf[pos:], typ)
			if n < 0 {
				return errSlow
			}
			pos += n
			setVarint(m, num, x)
			continue
		}
		field := stringField(m, num)
		if field == nil && num != fMsgData && num != fMsgFiles {
			return errSlow // state, deadline, unknown: proto.Unmarshal
		}
		if typ != protowire.BytesType {
			return errSlow
		}
		v, n := protowire.ConsumeBytes(buf[pos:])
		if n < 0 {
			return errSlow
		}
		from := pos + n - len(v)
		pos += n
		switch {
		case num == fMsgData:
			m.Data = raw[from:pos:pos]
		case !utf8.Valid(v):
			return errInvalidUTF8
		case num == fMsgFiles:
			m.Files = append(m.Files, all[from:pos])
		case seen&(1<<num) != 0:
			return errSlow // a repeat: the last one wins; proto.Unmarshal
		default:
			seen |= 1 << num
			*field = all[from:pos]
		}
	}
	return nil
}

// fastLargeMessage is fastMessage in two passes: the first sizes the
// strings, the second copies them into one backing, and the data apart.
func fastLargeMessage(buf []byte, m *agentsilov1.AgentMessage) error {
	type span struct {
		num      protowire.Number
		from, to int // in the strings' backing
	}
	var spans [21]span
	ns := 0
	var seen uint32 // the string fields read
	var backing strings.Builder
	// Pass 1: check the fields, set the scalars, and size the strings.
	total := 0
	for rest := buf; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return errSlow
		}
		rest = rest[n:]
		switch {
		case varintField(num):
			x, n := consumeVarintField(rest, typ)
			if n < 0 {
				return errSlow
			}
			rest = rest[n:]
			setVarint(m, num, x)
		case stringField(m, num) != nil, num == fMsgData, num == fMsgFiles:
			if typ != protowire.BytesType {
				return errSlow
			}
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return errSlow
			}
			rest = rest[n:]
			if num == fMsgData || num == fMsgFiles {
				continue
			}
			if seen&(1<<num) != 0 {
				return errSlow // a repeat: the last one wins; proto.Unmarshal
			}
			seen |= 1 << num
			if !utf8.Valid(v) {
				return errInvalidUTF8
			}
			total += len(v)
		default:
			return errSlow // state, deadline, unknown: proto.Unmarshal
		}
	}
	// Pass 2: the strings into one backing, and the bytes.
	backing.Grow(total)
	for rest := buf; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		rest = rest[n:]
		if typ == protowire.VarintType {
			_, n := protowire.ConsumeVarint(rest)
			rest = rest[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(rest)
		rest = rest[n:]
		switch num {
		case fMsgData:
			m.Data = append(make([]byte, 0, len(v)), v...)
		case fMsgFiles:
			if !utf8.Valid(v) {
				return errInvalidUTF8
			}
			m.Files = append(m.Files, string(v))
		default:
			from := backing.Len()
			backing.Write(v)
			spans[ns] = span{num: num, from: from, to: backing.Len()}
			ns++
		}
	}
	all := backing.String()
	for _, s := range spans[:ns] {
		*stringField(m, s.num) = all[s.from:s.to]
	}
	return nil
}
