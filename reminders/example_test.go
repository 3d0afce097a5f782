package reminders_test

import (
	"context"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/reminders"
)

// A reminder service over etcd: Register stores a reminder that outlives
// the agent's activations; its ticks go to Deliver (a silo's Runtime.Send).
func ExampleService_Register() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	svc, err := reminders.New(ctx, reminders.Config{
		Client:    cli,
		Prefix:    "/agentsilo/",
		MinPeriod: time.Minute,
		Deliver: func(ctx context.Context, msg *grain.Message) error {
			log.Printf("tick %s for %s", msg.MessageType, msg.To)
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer svc.Close()
	addr, err := grain.ParseAddress("Report:alice:daily")
	if err != nil {
		log.Fatal(err)
	}
	err = svc.Register(ctx, addr, grain.Reminder{
		Name: "digest", Period: 24 * time.Hour, MessageType: "report.send",
		Due: time.Now().Add(time.Hour),
	})
	if err != nil {
		log.Fatal(err)
	}
}
