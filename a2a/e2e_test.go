package a2a_test

import (
	"fmt"
	"slices"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentsilo/agentsilo/a2a/a2atest"
	"github.com/agentsilo/agentsilo/internal/etcdtest"
)

// The SDK's own client drives a real silo over HTTP on loopback, through
// each transport: spec 1.0 JSON-RPC and HTTP+JSON, and 0.3 JSON-RPC.
func TestEndToEnd(t *testing.T) {
	e := etcdtest.Start(t)
	s := startSilo(t, e, "s1", "/e2e/", nil)
	dev := map[string]string{"x-agentsilo-principal": "dev"}

	for i, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			v03 := tr == "JSONRPC-0.3"
			alias := fmt.Sprintf("a%d", i)
			asTask := taskOf(t)

			// Send: an Ask to the agent; the reply is the task's artifact.
			echo := dial(t, s, "Echo/dev/"+alias, tr, dev)
			task := asTask(echo.SendMessage(t.Context(), text("hello")))
			if task.Status.State != spec.TaskStateCompleted || artifactText(task) != "hello" {
				t.Fatalf("echo: %s %q", task.Status.State, artifactText(task))
			}
			got, err := echo.GetTask(t.Context(), &spec.GetTaskRequest{ID: task.ID})
			if err != nil || got.Status.State != spec.TaskStateCompleted || artifactText(got) != "hello" {
				t.Fatalf("get: %v %v", got, err)
			}
			if !v03 {
				list, err := echo.ListTasks(t.Context(), &spec.ListTasksRequest{IncludeArtifacts: true})
				if err != nil || len(list.Tasks) != 1 || list.Tasks[0].ID != task.ID {
					t.Fatalf("list: %+v %v", list, err)
				}
			}
			if _, err := echo.GetTask(t.Context(), &spec.GetTaskRequest{ID: "no-such-task"}); !isErr(err, spec.ErrTaskNotFound) {
				t.Fatalf("get of an unknown task: %v", err)
			}
			if _, err := echo.CancelTask(t.Context(), &spec.CancelTaskRequest{ID: task.ID}); !isErr(err, spec.ErrTaskNotCancelable) {
				t.Fatalf("cancel of a completed task: %v", err)
			}

			// Streaming: pushes become working updates and artifact chunks,
			// then the reply and the final state.
			stream := dial(t, s, "Stream/dev/"+alias, tr, dev)
			var kinds []string
			var chunks string
			for ev, err := range stream.SendStreamingMessage(t.Context(), text("2")) {
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				switch v := ev.(type) {
				case *spec.Task:
					kinds = append(kinds, "task:"+string(v.Status.State))
				case *spec.TaskStatusUpdateEvent:
					k := "status:" + string(v.Status.State)
					if v.Status.Message != nil {
						k += ":" + partsText(v.Status.Message.Parts)
					}
					kinds = append(kinds, k)
				case *spec.TaskArtifactUpdateEvent:
					kinds = append(kinds, fmt.Sprintf("artifact:%s:%v", v.Artifact.Name, v.Append))
					chunks += partsText(v.Artifact.Parts)
				}
			}
			want := []string{
				"task:TASK_STATE_WORKING",
				"status:TASK_STATE_WORKING:working on it",
				"artifact:story:false", "artifact::true",
				"artifact:reply:false",
				"status:TASK_STATE_COMPLETED",
			}
			if !slices.Equal(kinds, want) || chunks != "chunk 1;chunk 2;streamed 2" {
				t.Fatalf("stream events:\n got %q %q\nwant %q", kinds, chunks, want)
			}

			// input-required: the next message of the task reaches the same
			// agent, with the task's contextId in its state.
			iv := dial(t, s, "Interview/dev/"+alias, tr, dev)
			task = asTask(iv.SendMessage(t.Context(), text("hi")))
			if task.Status.State != spec.TaskStateInputRequired || statusText(task) != "what is your name?" {
				t.Fatalf("interview: %s %q", task.Status.State, statusText(task))
			}
			task2 := asTask(iv.SendMessage(t.Context(), follow(task, "name Ann")))
			wantText := fmt.Sprintf("hello Ann (context %s, turn 2)", task.ContextID)
			if task2.ID != task.ID || task2.Status.State != spec.TaskStateCompleted || artifactText(task2) != wantText {
				t.Fatalf("interview answer: %s %s %q, want %q", task2.ID, task2.Status.State, artifactText(task2), wantText)
			}
			if _, err := iv.SendMessage(t.Context(), follow(task2, "again")); err == nil {
				t.Fatal("a message on a completed task succeeded")
			}

			// Error codes map to states, with the reason.
			fail := dial(t, s, "Fail/dev/"+alias, tr, dev)
			for _, c := range []struct {
				text  string
				state spec.TaskState
				msg   string
			}{
				{"InvalidArgument", spec.TaskStateRejected, "InvalidArgument: failing with InvalidArgument as asked"},
				// An error whose code does not say whether the turn ran
				// is said to come from a turn that ran.
				{"Unavailable", spec.TaskStateFailed, "Unavailable: the turn of Fail:dev:" + alias + " ran and failed: failing with Unavailable as asked"},
				// A send returns at auth-required (the SDK interrupts a
				// blocking send there); the task then rests in
				// input-required.
				{"Unauthenticated", spec.TaskStateAuthRequired, "Unauthenticated: failing with Unauthenticated as asked"},
				{"type rejected", spec.TaskStateRejected, "because rejected"},
				{"type auth-required", spec.TaskStateAuthRequired, "because auth-required"},
			} {
				task := asTask(fail.SendMessage(t.Context(), text(c.text)))
				if c.state == spec.TaskStateAuthRequired && task.Status.State == spec.TaskStateInputRequired {
					// The SDK reads the task when it interrupts the send at
					// auth-required: the execution may have gone on already.
					task.Status.State = spec.TaskStateAuthRequired
				}
				if task.Status.State != c.state || statusText(task) != c.msg {
					t.Errorf("%s: %s %q, want %s %q", c.text, task.Status.State, statusText(task), c.state, c.msg)
				}
				if c.state == spec.TaskStateAuthRequired {
					waitFor(t, "the task to rest in input-required", func() bool {
						got, err := fail.GetTask(t.Context(), &spec.GetTaskRequest{ID: task.ID})
						return err == nil && got.Status.State == spec.TaskStateInputRequired && statusText(got) == c.msg
					})
				}
			}

			// Cancel: the running turn's context is cancelled, the task is
			// canceled.
			block := dial(t, s, "Block/dev/"+alias, tr, dev)
			var id spec.TaskID
			for ev, err := range block.SendStreamingMessage(t.Context(), text("wait")) {
				if err != nil {
					t.Fatalf("block: %v", err)
				}
				if u, ok := ev.(*spec.TaskStatusUpdateEvent); ok && u.Status.Message != nil && partsText(u.Status.Message.Parts) == "started" {
					id = u.TaskID
					break
				}
			}
			a2atest.Canceled.Lock()
			before := a2atest.Canceled.N["dev"]
			a2atest.Canceled.Unlock()
			task, err = block.CancelTask(t.Context(), &spec.CancelTaskRequest{ID: id})
			if err != nil || task.Status.State != spec.TaskStateCanceled {
				t.Fatalf("cancel: %v %v", task, err)
			}
			waitFor(t, "the blocked turn's context to end", func() bool {
				a2atest.Canceled.Lock()
				defer a2atest.Canceled.Unlock()
				return a2atest.Canceled.N["dev"] > before
			})
			got, err = block.GetTask(t.Context(), &spec.GetTaskRequest{ID: id})
			if err != nil || got.Status.State != spec.TaskStateCanceled {
				t.Fatalf("canceled task: %v %v", got, err)
			}
		})
	}
}
