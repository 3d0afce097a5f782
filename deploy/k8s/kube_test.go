package k8s_test

// TestOnKubernetes runs the kustomizations on a real control plane and
// does what users do with them: see controlplane_test.go for the control
// plane and podrunner_test.go for the kubelet and kube-proxy stand-ins.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// need skips t with one line naming what it needs when ok is false; under
// CI (CI=true), which has everything, it fails instead, so that the tier
// cannot go unrun there.
func need(t *testing.T, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("needs %s (CI runs as root with it: see .ci/run)", what)
	}
	t.Skipf("needs %s (bash .ci/run has it; see docs/kubernetes.md)", what)
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

type kubernetesClient = kubernetes.Interface

// The images the test's cluster runs, and the programs the pod runner
// maps them to.
const (
	siloImageV1 = "agentsilo/agentsilo:v1"
	siloImageV2 = "agentsilo/agentsilo:v2"
)

// userOverlay is a user's overlay of the base, at the root of their
// checkout: the silo image they built, and the demo agents turned on
// (SILO_EXAMPLES, the environment's --examples), so that there are agents
// to ask.
func userOverlay(tag string) string {
	return `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../deploy/k8s/base
images:
  - name: agentsilo/agentsilo
    newTag: ` + tag + `
patches:
  - target:
      kind: StatefulSet
      name: silo
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value:
          name: SILO_EXAMPLES
          value: "true"
`
}

func TestOnKubernetes(t *testing.T) {
	need(t, os.Geteuid() == 0, "root (network namespaces for the node and the pods)")
	for _, c := range []string{"ip", "chroot", "nft"} {
		_, err := exec.LookPath(c)
		need(t, err == nil, c+" (Debian's iproute2, coreutils, nftables)")
	}
	// Registered first, so checked last, after every cleanup: nothing
	// this test started goes on running.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if !t.Failed() {
			goleak.VerifyNone(t, ignore)
		}
	})

	// The programs: the control plane, and the silo "images".
	var cpBins controlPlaneBinaries
	var silo1, silo2, client string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		silo1, client = buildStatic(t, "./cmd/silo", "./cmd/client")
		// The second image: the same silo linked again with the image's
		// tag among its build settings (go version -m shows it), so
		// another program.
		silo2, _ = buildStatic(t, "-ldflags=-X=main.image="+siloImageV2, "./cmd/silo")
	}()
	cpBins = buildControlPlane(t)
	wg.Wait()
	if silo1 == "" || silo2 == "" || cpBins.etcd == "" {
		t.FailNow()
	}

	tr := newTree(t, "alice", "ops:admins")
	mine := filepath.Join(tr.root, "my-cluster")
	if err := os.MkdirAll(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	writeOverlay := func(tag string) {
		if err := os.WriteFile(filepath.Join(mine, "kustomization.yaml"), []byte(userOverlay(tag)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeOverlay("v1")

	// The node.
	prefix := fmt.Sprintf("ak8s%d", os.Getpid())
	node, err := addNetns(prefix + "-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.remove(); err != nil {
			t.Error(err)
		}
	})
	for _, step := range [][]string{
		{"link", "add", "br0", "type", "bridge"},
		{"addr", "add", nodeIP + "/24", "dev", "br0"},
		{"link", "set", "br0", "up"},
	} {
		if err := node.ip(step...); err != nil {
			t.Fatal(err)
		}
	}

	cp := startControlPlane(t, cpBins, node)
	ctx := t.Context()
	kc := cp.client
	const ns = "agentsilo"
	for _, name := range []string{ns, "agentsilo-tls", "agentsilo-external-etcd"} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	runDir := t.TempDir()
	runner, err := startPodRunner(ctx, kc, node, ns, prefix, runDir, map[string]string{
		siloImageV1:                            silo1,
		siloImageV2:                            silo2,
		"gcr.io/etcd-development/etcd:v3.6.16": cpBins.etcd,
	}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		runner.stop()
		if t.Failed() {
			dumpPodLogs(t, filepath.Join(runDir, "logs"))
		}
	})
	proxy := startServiceProxy(ctx, kc, node, ns, t.Logf)
	t.Cleanup(proxy.stop)

	// kubectl apply --server-side -k, for every kustomization: the base
	// (a dry run: the user's overlay below applies it for real), and each
	// overlay, with its component, in a namespace of its own, where the
	// controllers make their pods (which no node runs).
	applier := newApplier(t, cp)
	applier.apply(t, filepath.Join(tr.dir, "base"), ns, true)
	applier.apply(t, filepath.Join(tr.dir, "overlays", "tls"), "agentsilo-tls", false)
	applier.apply(t, filepath.Join(tr.dir, "overlays", "external-etcd"), "agentsilo-external-etcd", false)
	start := time.Now()
	applier.apply(t, mine, ns, false)

	waitStatefulSet(t, kc, ns, "etcd", 3, 4*time.Minute)
	waitStatefulSet(t, kc, ns, "silo", 3, 4*time.Minute)
	t.Logf("kubectl apply -k: 3 etcd members and 3 silos ready in %v", time.Since(start).Round(time.Second))

	checkControllersObjects(t, kc, ns)
	checkOverlayPods(t, kc)

	svc, err := kc.CoreV1().Services(ns).Get(ctx, "silo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl := &siloClient{node: node, bin: client, addr: svc.Spec.ClusterIP + ":7070", user: tr.keys["alice"], admin: tr.keys["ops"]}

	// One cluster of three, answering through the Service.
	waitFor(t, time.Minute, "three silos in one cluster", func() (bool, string) {
		out, err := cl.adminRun("members")
		return err == nil && countMembers(out) == 3, out + errString(err)
	})
	if out, err := cl.ask("Echo:hello", "hi there"); err != nil || strings.TrimSpace(out) != "hi there" {
		t.Fatalf("ask Echo:hello through the Service: %q, %v", out, err)
	}
	if _, err := cl.run(cl.user, "--api-key", strings.Repeat("0", 64), "ask", "Echo:x", "hi"); err == nil {
		t.Errorf("a key make-keys.sh did not print was let in")
	}

	// State and reminders to keep through what follows.
	const counters = 12
	for i := range counters {
		if out, err := cl.ask(fmt.Sprintf("Counter:c%d", i), "add 7"); err != nil {
			t.Fatalf("Counter:c%d add 7: %q, %v", i, out, err)
		}
	}
	for i := range 4 {
		if out, err := cl.ask(fmt.Sprintf("Ticker:t%d", i), "start 1m"); err != nil {
			t.Fatalf("Ticker:t%d start: %q, %v", i, out, err)
		}
	}
	checkKept := func(when string) {
		t.Helper()
		for i := range counters {
			out, err := cl.ask(fmt.Sprintf("Counter:c%d", i), "get")
			if err != nil || strings.TrimSpace(out) != "7" {
				t.Errorf("%s: Counter:c%d get: %q, %v; want 7", when, i, out, err)
			}
		}
		for i := range 4 {
			out, err := cl.run(cl.user, "reminders", fmt.Sprintf("Ticker:t%d", i))
			if err != nil || !strings.Contains(out, "tick") {
				t.Errorf("%s: reminders Ticker:t%d: %q, %v; want its reminder tick", when, i, out, err)
			}
		}
		checkOneActivationEach(t, cl, when)
	}
	checkKept("before any change")

	// kubectl delete pod silo-1: the controller makes it again.
	old, err := kc.CoreV1().Pods(ns).Get(ctx, "silo-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	load := startLoad(cl)
	start = time.Now()
	if err := kc.CoreV1().Pods(ns).Delete(ctx, "silo-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "silo-1 made again and ready", func() (bool, string) {
		p, err := kc.CoreV1().Pods(ns).Get(ctx, "silo-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.UID != old.UID && podReady(p), fmt.Sprintf("uid %s, ready %v", p.UID, podReady(p))
	})
	waitStatefulSet(t, kc, ns, "silo", 3, 2*time.Minute)
	waitFor(t, time.Minute, "three silos in one cluster", func() (bool, string) {
		out, err := cl.adminRun("members")
		return err == nil && countMembers(out) == 3, out + errString(err)
	})
	asks, failed := load.stop()
	t.Logf("kubectl delete pod silo-1: made again and ready in %v; %d Asks during it, %d failed", time.Since(start).Round(time.Second), asks, len(failed))
	for _, f := range failed {
		t.Errorf("an Ask failed while silo-1 was deleted: %s", f)
	}
	checkKept("after kubectl delete pod silo-1")

	// kubectl scale --replicas=5, and back to 3.
	load = startLoad(cl)
	start = time.Now()
	scale(t, kc, ns, "silo", 5)
	waitStatefulSet(t, kc, ns, "silo", 5, 3*time.Minute)
	waitFor(t, time.Minute, "five silos in one cluster", func() (bool, string) {
		out, err := cl.adminRun("members")
		return err == nil && countMembers(out) == 5, out + errString(err)
	})
	up := time.Since(start)
	// Agents asked now are placed on the new silos too.
	for i := range 20 {
		if out, err := cl.ask(fmt.Sprintf("Counter:n%d", i), "add 3"); err != nil {
			t.Errorf("Counter:n%d add 3: %q, %v", i, out, err)
		}
	}
	onNew := 0
	for _, a := range listAgents(t, cl) {
		if a.silo == "silo-3" || a.silo == "silo-4" {
			onNew++
		}
	}
	if onNew == 0 {
		t.Errorf("no agent lives on silo-3 or silo-4 after scaling to 5")
	}
	// The PodDisruptionBudget holds: one voluntary disruption at a time.
	checkPDB(t, kc, ns, "silo", 5)
	evict := func(name string) error {
		return kc.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	}
	if err := evict("silo-4"); err != nil {
		t.Fatalf("evicting silo-4 with the budget allowing one disruption: %v", err)
	}
	if err := evict("silo-3"); !apierrors.IsTooManyRequests(err) {
		t.Errorf("evicting silo-3 while silo-4 is evicted: %v, want 429 Too Many Requests from the PodDisruptionBudget", err)
	}
	waitStatefulSet(t, kc, ns, "silo", 5, 3*time.Minute)
	start = time.Now()
	scale(t, kc, ns, "silo", 3)
	waitStatefulSet(t, kc, ns, "silo", 3, 3*time.Minute)
	waitFor(t, time.Minute, "three silos in one cluster", func() (bool, string) {
		out, err := cl.adminRun("members")
		return err == nil && countMembers(out) == 3, out + errString(err)
	})
	down := time.Since(start)
	asks, failed = load.stop()
	t.Logf("kubectl scale: to 5 silos (ready, in the cluster) in %v, back to 3 in %v; %d Asks during it, %d failed",
		up.Round(time.Second), down.Round(time.Second), asks, len(failed))
	for _, f := range failed {
		t.Errorf("an Ask failed while scaling: %s", f)
	}
	for i := range 20 {
		out, err := cl.ask(fmt.Sprintf("Counter:n%d", i), "get")
		if err != nil || strings.TrimSpace(out) != "3" {
			t.Errorf("after scaling back to 3: Counter:n%d get: %q, %v; want 3", i, out, err)
		}
	}
	checkKept("after scaling to 5 and back to 3")
	checkPDB(t, kc, ns, "silo", 3)

	// A rolling update to a new image: the user's overlay names v2.
	writeOverlay("v2")
	load = startLoad(cl)
	start = time.Now()
	applier.apply(t, mine, ns, false)
	waitFor(t, 5*time.Minute, "the rolling update to v2", func() (bool, string) {
		s, err := kc.AppsV1().StatefulSets(ns).Get(ctx, "silo", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := s.Status
		return st.ObservedGeneration == s.Generation && st.UpdatedReplicas == 3 && st.ReadyReplicas == 3 && st.AvailableReplicas == 3 &&
			st.CurrentRevision == st.UpdateRevision, fmt.Sprintf("%+v", st)
	})
	rolled := time.Since(start)
	asks, failed = load.stop()
	t.Logf("rolling update to v2: %v; %d Asks during it, %d failed", rolled.Round(time.Second), asks, len(failed))
	for _, f := range failed {
		t.Errorf("an Ask failed during the rolling update: %s", f)
	}
	v2, err := os.Stat(silo2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		name := fmt.Sprintf("silo-%d", i)
		rp := runner.lookup(name)
		if rp == nil {
			t.Errorf("%s is not running", name)
			continue
		}
		exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", rp.pid()))
		if err != nil || !os.SameFile(exe, v2) {
			t.Errorf("%s runs %s (%v), want the v2 program", name, rp.image, err)
		}
	}
	checkKept("after the rolling update")

	// A pod failing its readiness probe gets no traffic: silo-2's gateway
	// stops answering the node (where the kubelet's probes, and the
	// Service's connections, come from), while it goes on as a member of
	// the cluster. Were the Service to send a connection there, its Ask
	// would fail.
	rp := runner.lookup("silo-2")
	if rp == nil {
		t.Fatal("silo-2 is not running")
	}
	block := exec.Command("ip", "netns", "exec", rp.netns.name, "nft", "-f", "-")
	block.Stdin = strings.NewReader(fmt.Sprintf(`table inet probefault {
  chain input {
    type filter hook input priority 0; policy accept;
    ip saddr %s tcp dport 7070 drop
  }
}
`, nodeIP))
	if out, err := block.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
	waitFor(t, time.Minute, "silo-2 not ready, and out of the Service's endpoints", func() (bool, string) {
		p, err := kc.CoreV1().Pods(ns).Get(ctx, "silo-2", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return !podReady(p) && !endpointReady(t, kc, ns, "silo", p.Status.PodIP), fmt.Sprintf("ready %v", podReady(p))
	})
	for i := range 30 {
		if out, err := cl.ask(fmt.Sprintf("Echo:r%d", i), "ready?"); err != nil {
			t.Errorf("Ask %d through the Service while silo-2 is not ready: %q, %v", i, out, err)
		}
	}
	unblock := exec.Command("ip", "netns", "exec", rp.netns.name, "nft", "delete", "table", "inet", "probefault")
	if out, err := unblock.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
	waitFor(t, time.Minute, "silo-2 ready again", func() (bool, string) {
		p, err := kc.CoreV1().Pods(ns).Get(ctx, "silo-2", metav1.GetOptions{})
		return err == nil && podReady(p), errString(err)
	})
}

// buildStatic builds main packages of the root module without cgo, as the
// Dockerfile does, and returns the first binary's path (and the second's).
func buildStatic(t *testing.T, args ...string) (string, string) {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Error(err)
		return "", ""
	}
	dir := t.TempDir()
	cmd := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
		return "", ""
	}
	var bins []string
	for _, a := range args {
		if strings.HasPrefix(a, "./") {
			bins = append(bins, filepath.Join(dir, filepath.Base(a)))
		}
	}
	bins = append(bins, "")
	return bins[0], bins[1]
}

// applier is kubectl apply --server-side.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(t *testing.T, cp *controlPlane) *applier {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.config)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cp.config)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}
}

// apply builds the kustomization in dir and applies each object
// server-side into namespace (kubectl apply --server-side -k dir -n
// namespace, with --dry-run=server if dryRun).
func (a *applier) apply(t *testing.T, dir, namespace string, dryRun bool) {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: "kubectl", Force: &force}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, r := range rm.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatal(err)
		}
		u.SetNamespace(namespace)
		gvk := u.GroupVersionKind()
		m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		body, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.dyn.Resource(m.Resource).Namespace(namespace).Patch(t.Context(), u.GetName(), types.ApplyPatchType, body, opts); err != nil {
			t.Fatalf("apply %s %s %s/%s (dry run %v): %v", dir, gvk.Kind, namespace, u.GetName(), dryRun, err)
		}
	}
}

// scale is kubectl scale statefulset/name --replicas=n.
func scale(t *testing.T, kc kubernetesClient, ns, name string, n int32) {
	t.Helper()
	s, err := kc.AppsV1().StatefulSets(ns).GetScale(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec = autoscalingv1.ScaleSpec{Replicas: n}
	if _, err := kc.AppsV1().StatefulSets(ns).UpdateScale(t.Context(), name, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitStatefulSet waits until the StatefulSet has n replicas, all of the
// current revision, ready and available, and exactly n pods.
func waitStatefulSet(t *testing.T, kc kubernetesClient, ns, name string, n int32, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("StatefulSet %s: %d ready", name, n), func() (bool, string) {
		s, err := kc.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods, err := kc.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(s.Spec.Selector)})
		if err != nil {
			return false, err.Error()
		}
		st := s.Status
		ok := st.ObservedGeneration == s.Generation && *s.Spec.Replicas == n && st.Replicas == n && st.ReadyReplicas == n &&
			st.AvailableReplicas == n && st.UpdatedReplicas == n && len(pods.Items) == int(n)
		var states []string
		for _, p := range pods.Items {
			states = append(states, fmt.Sprintf("%s %s ready=%v", p.Name, p.Status.Phase, podReady(&p)))
		}
		return ok, fmt.Sprintf("status %+v; pods %v", st, states)
	})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// endpointReady reports whether the Service's EndpointSlices hold ip as a
// ready endpoint.
func endpointReady(t *testing.T, kc kubernetesClient, ns, service, ip string) bool {
	slices, err := kc.DiscoveryV1().EndpointSlices(ns).List(t.Context(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return true
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if slicesContains(e.Addresses, ip) && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
				return true
			}
		}
	}
	return false
}

func slicesContains(s []string, v string) bool { return slices.Contains(s, v) }

// checkControllersObjects checks what the controllers made of the applied
// objects: the pods (their volumes, env and probes those of the template,
// their names, IPs and readiness), the endpoints, the PodDisruptionBudgets'
// status.
func checkControllersObjects(t *testing.T, kc kubernetesClient, ns string) {
	t.Helper()
	ctx := t.Context()
	for _, name := range []string{"silo", "etcd"} {
		s, err := kc.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tmpl := s.Spec.Template.Spec
		for i := range 3 {
			pname := fmt.Sprintf("%s-%d", name, i)
			p, err := kc.CoreV1().Pods(ns).Get(ctx, pname, metav1.GetOptions{})
			if err != nil {
				t.Errorf("pod %s: %v", pname, err)
				continue
			}
			c, want := p.Spec.Containers[0], tmpl.Containers[0]
			if !apiequality.Semantic.DeepEqual(c.Env, want.Env) || !apiequality.Semantic.DeepEqual(c.VolumeMounts, want.VolumeMounts) ||
				!apiequality.Semantic.DeepEqual(c.ReadinessProbe, want.ReadinessProbe) || !apiequality.Semantic.DeepEqual(c.LivenessProbe, want.LivenessProbe) ||
				!apiequality.Semantic.DeepEqual(c.StartupProbe, want.StartupProbe) || !slices.Equal(c.Args, want.Args) {
				t.Errorf("pod %s: its container differs from the StatefulSet's template", pname)
			}
			var vols []string
			for _, v := range p.Spec.Volumes {
				vols = append(vols, v.Name)
				if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName != "data-"+pname {
					t.Errorf("pod %s: volume %s claims %s, want data-%s", pname, v.Name, v.PersistentVolumeClaim.ClaimName, pname)
				}
			}
			var wantVols []string
			for _, v := range tmpl.Volumes {
				wantVols = append(wantVols, v.Name)
			}
			for _, c := range s.Spec.VolumeClaimTemplates {
				wantVols = append(wantVols, c.Name)
			}
			slices.Sort(vols)
			slices.Sort(wantVols)
			if !slices.Equal(vols, wantVols) {
				t.Errorf("pod %s: volumes %v, want %v", pname, vols, wantVols)
			}
			if p.Spec.Hostname != pname || p.Spec.Subdomain != s.Spec.ServiceName {
				t.Errorf("pod %s: hostname %q subdomain %q, want %s and %s", pname, p.Spec.Hostname, p.Spec.Subdomain, pname, s.Spec.ServiceName)
			}
			if !podReady(p) || p.Status.PodIP == "" {
				t.Errorf("pod %s: ready %v, IP %q", pname, podReady(p), p.Status.PodIP)
			}
		}
		// The governing headless Service names each pod, ready or not.
		sl, err := kc.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + s.Spec.ServiceName})
		if err != nil {
			t.Fatal(err)
		}
		var hosts []string
		for _, es := range sl.Items {
			for _, e := range es.Endpoints {
				if e.Hostname != nil {
					hosts = append(hosts, *e.Hostname)
				}
			}
		}
		slices.Sort(hosts)
		if want := []string{name + "-0", name + "-1", name + "-2"}; !slices.Equal(hosts, want) {
			t.Errorf("Service %s's endpoints name %v, want %v", s.Spec.ServiceName, hosts, want)
		}
		ep, err := kc.CoreV1().Endpoints(ns).Get(ctx, s.Spec.ServiceName, metav1.GetOptions{})
		if err != nil || len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) != 3 {
			t.Errorf("Endpoints %s: %+v, %v; want the three pods", s.Spec.ServiceName, ep, err)
		}
		checkPDB(t, kc, ns, name, 3)
	}
	// The gateway Service has the three ready silos.
	n := 0
	for i := range 3 {
		p, err := kc.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("silo-%d", i), metav1.GetOptions{})
		if err == nil && endpointReady(t, kc, ns, "silo", p.Status.PodIP) {
			n++
		}
	}
	if n != 3 {
		t.Errorf("Service silo has %d of the 3 silos as ready endpoints", n)
	}
}

// checkPDB: the budget counts n pods, all healthy, allowing one disruption.
func checkPDB(t *testing.T, kc kubernetesClient, ns, name string, n int32) {
	t.Helper()
	waitFor(t, time.Minute, "PodDisruptionBudget "+name+" status", func() (bool, string) {
		pdb, err := kc.PolicyV1().PodDisruptionBudgets(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := pdb.Status
		return st.ObservedGeneration == pdb.Generation && st.ExpectedPods == n && st.CurrentHealthy == n && st.DesiredHealthy == n-1 &&
			st.DisruptionsAllowed == 1, fmt.Sprintf("%+v", st)
	})
}

// checkOverlayPods: the overlays' StatefulSets made pods with what each
// overlay changes.
func checkOverlayPods(t *testing.T, kc kubernetesClient) {
	t.Helper()
	ctx := t.Context()
	var tlsPod, extPod *corev1.Pod
	waitFor(t, time.Minute, "the overlays' silo pods", func() (bool, string) {
		var err1, err2 error
		tlsPod, err1 = kc.CoreV1().Pods("agentsilo-tls").Get(ctx, "silo-0", metav1.GetOptions{})
		extPod, err2 = kc.CoreV1().Pods("agentsilo-external-etcd").Get(ctx, "silo-0", metav1.GetOptions{})
		return err1 == nil && err2 == nil, errString(err1) + errString(err2)
	})
	c := tlsPod.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || !slices.Contains(c.Args, "--tls-cert=/etc/agentsilo/tls/tls.crt") {
		t.Errorf("overlays/tls: pod silo-0 has readiness %+v and args %q, want /readyz and --tls-cert", c.ReadinessProbe, c.Args)
	}
	if !slices.ContainsFunc(tlsPod.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "silo-tls" }) {
		t.Errorf("overlays/tls: pod silo-0 mounts no Secret silo-tls")
	}
	for _, e := range extPod.Spec.Containers[0].Env {
		if e.Name == "ETCD_ENDPOINTS" && !strings.Contains(e.Value, "etcd-a.example.internal") {
			t.Errorf("overlays/external-etcd: ETCD_ENDPOINTS=%s", e.Value)
		}
	}
	if _, err := kc.AppsV1().StatefulSets("agentsilo-external-etcd").Get(ctx, "etcd", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("overlays/external-etcd: StatefulSet etcd: %v, want none", err)
	}
}

// siloClient runs the silo's client in the node's network namespace,
// against the Service's ClusterIP, as a client in the cluster would.
type siloClient struct {
	node        *netns
	bin, addr   string
	user, admin string // API keys: alice's, and ops's (group admins)
}

func (c *siloClient) run(key string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", c.node.name, c.bin, "--addr", c.addr, "--api-key", key, "--timeout", "20s"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

func (c *siloClient) ask(agent, text string) (string, error) {
	return c.run(c.user, "ask", agent, text)
}

func (c *siloClient) adminRun(args ...string) (string, error) { return c.run(c.admin, args...) }

// countMembers counts the silos `client members` lists as alive.
func countMembers(out string) int {
	n := 0
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if i > 0 && strings.Contains(line, "alive") {
			n++
		}
	}
	return n
}

type agentRow struct{ address, silo string }

func listAgents(t *testing.T, c *siloClient) []agentRow {
	t.Helper()
	out, err := c.adminRun("agents")
	if err != nil {
		t.Fatalf("client agents: %v", err)
	}
	var rows []agentRow
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 2 {
			continue
		}
		rows = append(rows, agentRow{f[0], f[1]})
	}
	return rows
}

// checkOneActivationEach: no agent is active on two silos.
func checkOneActivationEach(t *testing.T, c *siloClient, when string) {
	t.Helper()
	seen := map[string]string{}
	for _, a := range listAgents(t, c) {
		if s, ok := seen[a.address]; ok {
			t.Errorf("%s: %s is active on %s and %s", when, a.address, s, a.silo)
		}
		seen[a.address] = a.silo
	}
	if len(seen) == 0 {
		t.Errorf("%s: client agents lists no agent", when)
	}
}

// load asks Echo agents through the Service, one Ask after another, until
// stopped.
type load struct {
	stopc  chan struct{}
	done   chan struct{}
	asks   atomic.Int64
	mu     sync.Mutex
	failed []string
}

func startLoad(c *siloClient) *load {
	l := &load{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := 0; ; i++ {
			select {
			case <-l.stopc:
				return
			default:
			}
			agent := fmt.Sprintf("Echo:load%d", i%24)
			out, err := c.ask(agent, "ping")
			l.asks.Add(1)
			if err != nil || strings.TrimSpace(out) != "ping" {
				l.mu.Lock()
				l.failed = append(l.failed, fmt.Sprintf("%s at %s: %q, %v", agent, time.Now().Format(time.TimeOnly), out, err))
				l.mu.Unlock()
			}
		}
	}()
	return l
}

func (l *load) stop() (int64, []string) {
	close(l.stopc)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.asks.Load(), l.failed
}

// dumpPodLogs logs the end of each pod's output.
func dumpPodLogs(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		t.Logf("--- pod log %s:\n%s", e.Name(), data)
	}
}

// docBlock returns the fenced block after <!-- marker --> in the file at
// path (relative to the repository's root).
func docBlock(t *testing.T, path, marker string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "<!-- "+marker+" -->\n")
	if !ok {
		t.Fatalf("%s has no <!-- %s --> block", path, marker)
	}
	_, rest, _ = strings.Cut(rest, "\n")
	block, _, _ := strings.Cut(rest, "```")
	return block
}

// TestKubernetesDoc: the command docs/kubernetes.md gives for the tier on
// a real control plane is the README's test command's line for this
// module, which CI runs.
func TestKubernetesDoc(t *testing.T) {
	cmd := strings.TrimSpace(docBlock(t, "docs/kubernetes.md", "k8s:test"))
	readme := docBlock(t, "README.md", "ci:test")
	if !slices.Contains(strings.Split(readme, "\n"), cmd) || !strings.Contains(cmd, "cd deploy/k8s") {
		t.Errorf("docs/kubernetes.md's command %q is not the README's line for deploy/k8s (README: %q)", cmd, readme)
	}
}
