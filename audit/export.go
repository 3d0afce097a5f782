package audit

import (
	"bufio"
	"encoding/json"
	"io"
	"strconv"
)

// WriteJSONLines writes recs to w, one JSON object per line.
func WriteJSONLines(w io.Writer, recs []Record) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// The OTLP/JSON form of log records (the OpenTelemetry protocol's JSON
// encoding of ExportLogsServiceRequest), which an OpenTelemetry
// Collector's otlpjsonfile receiver, or an OTLP/HTTP endpoint taking
// application/json, reads.
type (
	otlpLogs struct {
		ResourceLogs []otlpResourceLogs `json:"resourceLogs"`
	}
	otlpResourceLogs struct {
		Resource  otlpResource    `json:"resource"`
		ScopeLogs []otlpScopeLogs `json:"scopeLogs"`
	}
	otlpResource struct {
		Attributes []otlpKV `json:"attributes"`
	}
	otlpScopeLogs struct {
		Scope      otlpScope       `json:"scope"`
		LogRecords []otlpLogRecord `json:"logRecords"`
	}
	otlpScope struct {
		Name string `json:"name"`
	}
	otlpLogRecord struct {
		TimeUnixNano   string   `json:"timeUnixNano"`
		SeverityNumber int      `json:"severityNumber"`
		SeverityText   string   `json:"severityText"`
		Body           otlpAny  `json:"body"`
		Attributes     []otlpKV `json:"attributes"`
	}
	otlpKV struct {
		Key   string  `json:"key"`
		Value otlpAny `json:"value"`
	}
	otlpAny struct {
		StringValue *string    `json:"stringValue,omitempty"`
		IntValue    *string    `json:"intValue,omitempty"`
		ArrayValue  *otlpArray `json:"arrayValue,omitempty"`
	}
	otlpArray struct {
		Values []otlpAny `json:"values"`
	}
)

func otlpString(s string) otlpAny { return otlpAny{StringValue: &s} }
func otlpInt(n int64) otlpAny {
	s := strconv.FormatInt(n, 10)
	return otlpAny{IntValue: &s}
}

// WriteOTLPJSON writes recs to w as one OTLP/JSON logs request: each record
// a log record at INFO (WARN for an error outcome), its kind the body, its
// fields attributes named audit.*, under the service name agentsilo and
// the scope agentsilo/audit.
func WriteOTLPJSON(w io.Writer, recs []Record) error {
	out := make([]otlpLogRecord, 0, len(recs))
	for _, r := range recs {
		lr := otlpLogRecord{
			TimeUnixNano:   strconv.FormatInt(r.Time.UnixNano(), 10),
			SeverityNumber: 9,
			SeverityText:   "INFO",
			Body:           otlpString(r.Kind),
		}
		if r.Outcome == OutcomeError {
			lr.SeverityNumber, lr.SeverityText = 13, "WARN"
		}
		add := func(k, v string) {
			if v != "" {
				lr.Attributes = append(lr.Attributes, otlpKV{Key: "audit." + k, Value: otlpString(v)})
			}
		}
		add("partition", r.Partition)
		lr.Attributes = append(lr.Attributes, otlpKV{Key: "audit.seq", Value: otlpInt(int64(r.Seq))})
		add("key", r.Key)
		add("kind", r.Kind)
		add("principal", r.Principal)
		if len(r.OnBehalfOf) > 0 {
			arr := &otlpArray{}
			for _, p := range r.OnBehalfOf {
				arr.Values = append(arr.Values, otlpString(p))
			}
			lr.Attributes = append(lr.Attributes, otlpKV{Key: "audit.on_behalf_of", Value: otlpAny{ArrayValue: arr}})
		}
		add("agent", r.Agent)
		add("skill", r.Skill)
		add("task", r.Task)
		add("correlation", r.Correlation)
		add("trigger", r.Trigger)
		add("decision", r.Decision)
		add("outcome", r.Outcome)
		add("detail", r.Detail)
		if r.Tokens != 0 {
			lr.Attributes = append(lr.Attributes, otlpKV{Key: "audit.tokens", Value: otlpInt(r.Tokens)})
		}
		add("prev", r.Prev)
		add("hash", r.Hash)
		out = append(out, lr)
	}
	doc := otlpLogs{ResourceLogs: []otlpResourceLogs{{
		Resource:  otlpResource{Attributes: []otlpKV{{Key: "service.name", Value: otlpString("agentsilo")}}},
		ScopeLogs: []otlpScopeLogs{{Scope: otlpScope{Name: "agentsilo/audit"}, LogRecords: out}},
	}}}
	return json.NewEncoder(w).Encode(doc)
}
