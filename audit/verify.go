package audit

import "context"

// Report is what Verify found.
type Report struct {
	// Partitions and Records count what it checked.
	Partitions int `json:"partitions"`
	Records    int `json:"records"`
	// OK says every chain matched; else Bad is the first record that does
	// not match (by partition, then sequence) and Reason why.
	OK     bool    `json:"ok"`
	Bad    *Record `json:"bad,omitempty"`
	Reason string  `json:"reason,omitempty"`
}

// Verify checks every partition's chain from its anchor to its head: each
// record's sequence number follows the one before, its Prev is the hash
// of the one before (the anchor's for the first), its Hash is its Sum, and
// the last one is the head. It stops at the first record that does not
// match and names it.
func Verify(ctx context.Context, st Store) (Report, error) {
	heads, err := st.Heads(ctx)
	if err != nil {
		return Report{}, err
	}
	rep := Report{OK: true}
	for _, h := range heads {
		rep.Partitions++
		seq, prev := h.AnchorSeq, h.AnchorHash
		after := h.AnchorSeq
		for {
			recs, err := st.Scan(ctx, h.Partition, after, scanPage)
			if err != nil {
				return Report{}, err
			}
			for i := range recs {
				r := &recs[i]
				rep.Records++
				reason := ""
				switch {
				case r.Seq != seq+1:
					reason = "a record is missing before it (its sequence number does not follow)"
				case r.Prev != prev:
					reason = "its prev hash is not the hash of the record before it"
				case r.Partition != h.Partition:
					reason = "it names another partition"
				case r.Hash != r.Sum():
					reason = "its hash does not match its content: it was changed"
				case r.Seq > h.Seq:
					reason = "it is past the partition's head"
				}
				if reason != "" {
					bad := *r
					bad.Partition = h.Partition
					rep.OK, rep.Bad, rep.Reason = false, &bad, reason
					return rep, nil
				}
				seq, prev = r.Seq, r.Hash
			}
			if len(recs) < scanPage {
				break
			}
			after = recs[len(recs)-1].Seq
		}
		if seq != h.Seq || prev != h.Hash {
			rep.OK = false
			rep.Bad = &Record{Partition: h.Partition, Seq: seq + 1}
			rep.Reason = "records at the end of the partition are missing (its head is past them)"
			if seq > h.Seq {
				rep.Reason = "the partition's head is behind its records"
			}
			return rep, nil
		}
	}
	return rep, nil
}
