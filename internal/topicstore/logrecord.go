package topicstore

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
)

// A message in a topic's log is stored once, as a log record: the bytes of
// its TopicEntry followed by the ids of the subscriptions it was matched to
// when it was published, as field fieldSubs (repeated string), which
// TopicEntry does not define. A subscription's follower reads only that
// field to know whether a record is its own (recordNames), and decodes the
// entry of those that are (decodeEntry drops the field).
//
// An entry a subscription holds apart from the log (retried, see
// Store.Update) carries, as field fieldPos, the log position it came from,
// so that reading the subscription's queue again keeps it in its place.
const (
	fieldPos  = 14
	fieldSubs = 15
)

// encodeRecord is e's log record, naming subs.
func encodeRecord(e *Entry, subs []string) ([]byte, error) {
	b, err := proto.Marshal(e)
	if err != nil {
		return nil, errs.New(codes.Internal, "topics: encode a log record: %w", err)
	}
	for _, id := range subs {
		b = protowire.AppendTag(b, fieldSubs, protowire.BytesType)
		b = protowire.AppendString(b, id)
	}
	return b, nil
}

// encodeHeld is e, held apart from the log at position pos (0: none).
func encodeHeld(e *Entry, pos int64) ([]byte, error) {
	b, err := proto.Marshal(e)
	if err != nil {
		return nil, errs.New(codes.Internal, "topics: encode a queued message: %w", err)
	}
	if pos > 0 {
		b = protowire.AppendTag(b, fieldPos, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(pos))
	}
	return b, nil
}

// recordNames reports whether the log record b names subscription id,
// without decoding its message.
func recordNames(b []byte, id string) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == fieldSubs && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			if string(v) == id {
				return true
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return false
}

// heldPos is the log position a held entry came from (0: none).
func heldPos(b []byte) int64 {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0
		}
		b = b[n:]
		if num == fieldPos && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0
			}
			return int64(v)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0
		}
		b = b[n:]
	}
	return 0
}

// decodeEntry decodes a log record's or a held entry's TopicEntry.
func decodeEntry(b []byte) (*Entry, error) {
	e := &Entry{}
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, e); err != nil {
		return nil, err
	}
	return e, nil
}
