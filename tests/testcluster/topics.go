package testcluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/agentsilo/agentsilo/internal/demoagents"
)

// TopicSink returns the path of the file the silos' TopicSink agents
// (package internal/demoagents) write a line to for each topic message delivered.
func (c *Cluster) TopicSink() string { return c.journal + ".topics" }

// ReadTopicSink reads the lines the TopicSink agents wrote so far, in the
// order written; a line cut short by a killed process is skipped.
func (c *Cluster) ReadTopicSink() ([]demoagents.SinkLine, error) {
	f, err := os.Open(c.TopicSink())
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []demoagents.SinkLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l demoagents.SinkLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			continue
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("testcluster: reading %s: %w", c.TopicSink(), err)
	}
	return out, nil
}
