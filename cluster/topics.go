package cluster

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentsilo/agentsilo/errs"
	"github.com/agentsilo/agentsilo/grain"
	"github.com/agentsilo/agentsilo/internal/membership"
	"github.com/agentsilo/agentsilo/internal/topicstore"
	agentsilov1 "github.com/agentsilo/agentsilo/proto/agentsilo/v1"
	"github.com/agentsilo/agentsilo/topics"
)

// Topics in a silo: the topics.Service keeps its subscriptions and queues
// in etcd (topicstore.EtcdStore), or in NATS JetStream with --topic-store
// (topicstore.JetStreamStore), publishes for the agents and clients of this
// silo, and delivers the subscriptions this silo owns: a subscription is
// placed like an agent, by rendezvous hashing of "topics/<id>" over the
// view, and follows the views as reminders do (Rebalance at each). During
// a view change two silos may deliver one subscription for a moment: a
// message may then be delivered twice, as after a crash.
//
// Broadcast is cluster-wide: the runtime reaches this silo's agents, and
// each other silo is asked (msgBroadcast) to reach its own.

// msgBroadcast asks a silo to broadcast the message in Data (protobuf) to
// its activations matching the pattern in Message; the reply's Message is
// how many it reached.
const msgBroadcast = grain.ReservedPrefix + "broadcast"

// topicsKey is the placement key of a subscription's delivery.
func topicsKey(id string) string { return "topics/" + id }

// newTopics makes the silo's topics.Service on its etcd, or on NATS
// JetStream (SiloConfig.TopicStore).
func (s *Silo) newTopics(ctx context.Context) (*topics.Service, error) {
	cfg := s.sub.topics
	store, err := s.topicStore(ctx)
	if err != nil {
		return nil, err
	}
	topicstore.Wire(&cfg, topicstore.Wiring{Store: store, Clock: s.clk})
	cfg.Owns = func(id string) bool {
		return s.router.state.Load().self && s.router.Route(topicsKey(id)) == ""
	}
	cfg.Known = func(t string) bool { _, ok := s.reg.Lookup(t); return ok }
	cfg.Logger = s.logger
	cfg.TracerProvider = s.cfg.TracerProvider
	tm, err := newTopicMetrics(s.collectors)
	if err != nil {
		return nil, err
	}
	cfg.Observe = tm
	return topics.New(cfg)
}

// topicStore opens the store SiloConfig.TopicStore names.
func (s *Silo) topicStore(ctx context.Context) (topicstore.Store, error) {
	url := s.cfg.TopicStore
	switch {
	case url == "" || url == "etcd":
		return topicstore.NewEtcdStore(s.etcd.Client(), s.etcd.Prefix(), s.logger), nil
	case !strings.HasPrefix(url, "nats://") && !strings.HasPrefix(url, "tls://"):
		return nil, errs.New(codes.InvalidArgument, "--topic-store %q: use etcd, or nats://HOST:PORT for NATS JetStream", topicstore.RedactURLs(url))
	}
	jc := topicstore.DefaultJetStreamConfig(url)
	n := s.cfg.TopicNATS
	jc.CredsFile, jc.CAFile, jc.CertFile, jc.KeyFile = n.CredsFile, n.CAFile, n.CertFile, n.KeyFile
	if n.Bucket != "" {
		jc.Bucket = n.Bucket
	}
	if n.Replicas != 0 {
		jc.Replicas = n.Replicas
	}
	js, err := topicstore.OpenJetStream(ctx, jc, s.logger)
	if err != nil {
		return nil, err
	}
	s.topicJS = js
	return js, nil
}

// topicsFollowViews is the view observer that moves subscriptions' delivery
// with ownership.
func topicsFollowViews(svc *topics.Service) func(prev, cur membership.View) {
	return func(prev, cur membership.View) { svc.Rebalance() }
}

// broadcastPeers is the runtime's Config.Broadcast: every other silo of the
// view reaches its own activations matching pattern.
func (c clusterInfo) broadcastPeers(ctx context.Context, pattern string, msg *agentsilov1.AgentMessage) (int, error) {
	b, err := proto.Marshal(msg)
	if err != nil {
		return 0, errs.New(codes.Internal, "broadcast: %w", err)
	}
	n := 0
	err = c.askPeersData(ctx, msgBroadcast, pattern, b, func(_ string, reply *agentsilov1.AgentMessage) error {
		m, err := strconv.Atoi(reply.GetMessage())
		n += m
		return err
	})
	return n, err
}

// Broadcast reaches the activations matching pattern on every silo, on
// behalf of msg.From (a client session): the gateway's Topics service
// calls it.
func (c clusterInfo) Broadcast(ctx context.Context, pattern string, w *agentsilov1.AgentMessage) (int, error) {
	msg := grain.MessageFromProto(w)
	n, err := c.rt.BroadcastLocal(ctx, pattern, msg)
	if err != nil {
		return n, err
	}
	m, err := c.broadcastPeers(ctx, pattern, grain.MessageToProto(msg))
	return n + m, err
}

// broadcast handles a peer's msgBroadcast.
func (h *peerHandler) broadcast(ctx context.Context, req *agentsilov1.AgentMessage) (*agentsilov1.AgentMessage, error) {
	var w agentsilov1.AgentMessage
	if err := proto.Unmarshal(req.GetData(), &w); err != nil {
		return nil, errs.New(codes.InvalidArgument, "broadcast: %w", err)
	}
	n, err := h.rt.BroadcastLocal(ctx, req.GetMessage(), grain.MessageFromProto(&w))
	if err != nil && n == 0 {
		return nil, err
	}
	return &agentsilov1.AgentMessage{Kind: agentsilov1.Kind_KIND_RESPONSE, Message: strconv.Itoa(n)}, nil
}

// topicMetrics counts what the silo's topics.Service does (its
// topics.Observer).
type topicMetrics struct {
	published  prometheus.Counter
	copies     prometheus.Counter
	deliveries *prometheus.CounterVec
	outcomes   map[string]prometheus.Counter
	dead       prometheus.Counter
}

func newTopicMetrics(reg registerer) (*topicMetrics, error) {
	m := &topicMetrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentsilo_topic_published_total",
			Help: "Messages published through this silo (durable when counted).",
		}),
		copies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentsilo_topic_queued_total",
			Help: "Copies of published messages queued for subscriptions, through this silo.",
		}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentsilo_topic_deliveries_total",
			Help: "Deliveries of subscriptions' messages by this silo, by outcome: ack, retry (the handler asked), error (another failure), unavailable (not counted as an attempt), poison.",
		}, []string{"outcome"}),
		dead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentsilo_topic_dead_letters_total",
			Help: "Messages that became dead letters on this silo (poison, or out of attempts).",
		}),
		outcomes: map[string]prometheus.Counter{},
	}
	for _, o := range []string{"ack", "retry", "error", "unavailable", "poison"} {
		m.outcomes[o] = m.deliveries.WithLabelValues(o)
	}
	for _, c := range []prometheus.Collector{m.published, m.copies, m.deliveries, m.dead} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errs.New(codes.InvalidArgument, "topics metrics: a registry per silo: %w", err)
			}
			return nil, err
		}
	}
	return m, nil
}

func (m *topicMetrics) Published(subs int) {
	m.published.Inc()
	m.copies.Add(float64(subs))
}

func (m *topicMetrics) Delivered(outcome string) {
	if c := m.outcomes[outcome]; c != nil {
		c.Inc()
	}
}

func (m *topicMetrics) DeadLettered() { m.dead.Inc() }
