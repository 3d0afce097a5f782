package k8s_test

// The pod runner: a stand-in for the kubelet (and, binding pods to its one
// node, for the scheduler). For each pod of its namespace it runs the
// pod's one container as a process: the program its image maps to, with
// the pod's command, args and env (downward API fields filled in), in a
// root of its own holding the pod's mounted ConfigMaps, Secrets and
// volumes, a resolv.conf naming the cluster's DNS, and the program; in a
// network namespace of its own with the pod's IP, as the container's user.
// It runs the pod's probes, reports the pod's IP, readiness and restarts to
// the API server, restarts a container that exits or fails its liveness
// probe, and on deletion runs the preStop sleep, sends SIGTERM, waits for
// the grace period, and deletes the pod.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

const nodeName = "node-0"

// podRunner is the kubelet stand-in.
type podRunner struct {
	client    kubernetes.Interface
	node      *netns
	namespace string
	prefix    string            // of the pods' network namespaces' names
	images    map[string]string // image -> the program it runs
	dir       string            // the pods' roots and logs
	logf      func(format string, args ...any)

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	kick    chan struct{}
	factory informers.SharedInformerFactory
	store   cache.Store

	mu     sync.Mutex
	pods   map[types.UID]*runPod
	nextIP int
}

// runPod is one pod the runner runs.
type runPod struct {
	uid       types.UID
	name      string
	ip        string
	image     string
	netns     *netns
	root      string
	terminate chan int64 // the grace period, once the pod is being deleted
	done      chan struct{}

	mu         sync.Mutex
	proc       *exec.Cmd
	started    time.Time
	isStarted  bool // the startup probe passed
	ready      bool
	readySince time.Time
	restarts   int32
	reportMu   sync.Mutex
}

// startPodRunner registers the node and starts running the pods of
// namespace.
func startPodRunner(ctx context.Context, client kubernetes.Interface, node *netns, namespace, prefix, dir string, images map[string]string, logf func(string, ...any)) (*podRunner, error) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"kubernetes.io/hostname": nodeName}},
	}
	created, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("registering node %s: %w", nodeName, err)
	}
	now := metav1.Now()
	created.Status = corev1.NodeStatus{
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU: mustQuantity("32"), corev1.ResourceMemory: mustQuantity("64Gi"), corev1.ResourcePods: mustQuantity("110"),
		},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "PodRunnerReady",
			LastHeartbeatTime: now, LastTransitionTime: now}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}, {Type: corev1.NodeHostName, Address: nodeName}},
	}
	created.Status.Allocatable = created.Status.Capacity
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("node %s status: %w", nodeName, err)
	}

	r := &podRunner{client: client, node: node, namespace: namespace, prefix: prefix, images: images, dir: dir, logf: logf,
		kick: make(chan struct{}, 1), pods: map[types.UID]*runPod{}, nextIP: 2}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	inf := r.factory.Core().V1().Pods().Informer()
	kick := func() {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick() },
		UpdateFunc: func(any, any) { kick() },
		DeleteFunc: func(any) { kick() },
	})
	r.store = inf.GetStore()
	r.factory.Start(r.ctx.Done())
	r.factory.WaitForCacheSync(ctx.Done())
	r.wg.Add(1)
	go r.loop()
	return r, nil
}

// stop kills every pod's process, removes their network namespaces and
// stops watching.
func (r *podRunner) stop() {
	r.cancel()
	r.wg.Wait()
	r.factory.Shutdown()
}

func (r *podRunner) loop() {
	defer r.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		r.reconcile()
		select {
		case <-r.ctx.Done():
			return
		case <-r.kick:
		case <-tick.C:
		}
	}
}

func (r *podRunner) reconcile() {
	seen := map[types.UID]bool{}
	for _, obj := range r.store.List() {
		pod := obj.(*corev1.Pod)
		seen[pod.UID] = true
		if pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil {
			// The scheduler's part: bind the pod to this node.
			b := &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
				Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName},
			}
			// (A conflict: the informer has not seen an earlier binding yet.)
			if err := r.client.CoreV1().Pods(pod.Namespace).Bind(r.ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsConflict(err) && r.ctx.Err() == nil {
				r.logf("binding pod %s: %v", pod.Name, err)
			}
			continue
		}
		if pod.Spec.NodeName != nodeName {
			continue
		}
		r.mu.Lock()
		rp := r.pods[pod.UID]
		r.mu.Unlock()
		switch {
		case rp == nil && pod.DeletionTimestamp != nil:
			// Never started here: nothing to stop.
			r.deletePod(pod.Name, pod.UID)
		case rp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed:
			r.startPod(pod.DeepCopy())
		case rp != nil && pod.DeletionTimestamp != nil:
			grace := int64(30)
			if pod.DeletionGracePeriodSeconds != nil {
				grace = *pod.DeletionGracePeriodSeconds
			}
			select {
			case rp.terminate <- grace:
			default:
			}
		}
	}
	// A pod deleted at once (grace 0) or otherwise gone: stop its process.
	r.mu.Lock()
	for uid, rp := range r.pods {
		if !seen[uid] {
			select {
			case rp.terminate <- 0:
			default:
			}
		}
	}
	r.mu.Unlock()
}

func (r *podRunner) deletePod(name string, uid types.UID) {
	zero := int64(0)
	err := r.client.CoreV1().Pods(r.namespace).Delete(r.ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && r.ctx.Err() == nil {
		r.logf("deleting pod %s: %v", name, err)
	}
}

// startPod sets up the pod's network and root and starts its run.
func (r *podRunner) startPod(pod *corev1.Pod) {
	r.mu.Lock()
	octet := r.nextIP
	r.nextIP++
	r.mu.Unlock()
	if octet > 254 {
		r.logf("pod %s: out of pod addresses", pod.Name)
		return
	}
	rp := &runPod{uid: pod.UID, name: pod.Name, ip: podPrefix + strconv.Itoa(octet), image: pod.Spec.Containers[0].Image,
		terminate: make(chan int64, 1), done: make(chan struct{})}
	if err := r.setUpNetwork(rp, octet); err != nil {
		r.logf("pod %s: network: %v", pod.Name, err)
		return
	}
	r.mu.Lock()
	r.pods[pod.UID] = rp
	r.mu.Unlock()
	r.wg.Add(1)
	go r.run(pod, rp)
}

// setUpNetwork makes the pod's network namespace: eth0 with the pod's
// IP, the other end of its veth pair on the node's bridge, and a default
// route through the node.
func (r *podRunner) setUpNetwork(rp *runPod, octet int) error {
	ns, err := addNetns(fmt.Sprintf("%s-p%d", r.prefix, octet))
	if err != nil {
		return err
	}
	veth := "veth" + strconv.Itoa(octet)
	for _, step := range [][]string{
		{"-n", r.node.name, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns.name},
		{"-n", r.node.name, "link", "set", veth, "master", "br0", "up"},
		{"-n", ns.name, "addr", "add", rp.ip + "/24", "dev", "eth0"},
		{"-n", ns.name, "link", "set", "eth0", "up"},
		{"-n", ns.name, "route", "add", "default", "via", nodeIP},
	} {
		if err := ipCmd(step...); err != nil {
			ns.remove()
			return err
		}
	}
	rp.netns = ns
	return nil
}

// run runs the pod until it is deleted or the runner stops.
func (r *podRunner) run(pod *corev1.Pod, rp *runPod) {
	defer r.wg.Done()
	defer func() {
		rp.netns.remove()
		r.mu.Lock()
		delete(r.pods, rp.uid)
		r.mu.Unlock()
		close(rp.done)
	}()
	if len(pod.Spec.Containers) != 1 {
		r.logf("pod %s: the pod runner runs pods of one container, this one has %d", pod.Name, len(pod.Spec.Containers))
		return
	}
	c := &pod.Spec.Containers[0]
	// As the kubelet, retry what the container needs (a Secret not made
	// yet, ...) until it is there or the pod is deleted.
	var argv, env []string
	for wait := time.Second; ; wait = min(2*wait, 10*time.Second) {
		var err error
		if argv, env, err = r.prepare(pod, rp, c); err == nil {
			break
		}
		r.logf("pod %s: %v (trying again in %v)", pod.Name, err, wait)
		r.report(pod, rp, err.Error())
		select {
		case <-time.After(wait):
			continue
		case <-rp.terminate:
			r.deletePod(pod.Name, pod.UID)
		case <-r.ctx.Done():
		}
		return
	}
	// The pod's IP first, as the kubelet reports it once the pod's network
	// is up: the DNS names of a StatefulSet's pods (etcd-0.etcd, ...)
	// resolve only once the endpoints hold it.
	rp.mu.Lock()
	rp.started = time.Now()
	rp.mu.Unlock()
	r.report(pod, rp, "")
	backoff := time.Second
	for {
		exited, err := r.startContainer(pod, rp, argv, env)
		if err != nil {
			r.logf("pod %s: %v", pod.Name, err)
			return
		}
		probeCtx, stopProbes := context.WithCancel(r.ctx)
		probesDone := make(chan struct{})
		go func() {
			defer close(probesDone)
			r.probe(probeCtx, pod, rp, c)
		}()
		r.report(pod, rp, "")
		select {
		case <-exited:
			stopProbes()
			<-probesDone
			rp.mu.Lock()
			rp.restarts++
			rp.ready, rp.readySince, rp.isStarted = false, time.Now(), false
			rp.mu.Unlock()
			r.report(pod, rp, "")
			select {
			case <-time.After(backoff):
			case grace := <-rp.terminate:
				_ = grace
				r.deletePod(pod.Name, pod.UID)
				return
			case <-r.ctx.Done():
				return
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		case grace := <-rp.terminate:
			stopProbes()
			<-probesDone
			r.terminate(pod, rp, c, grace, exited)
			r.deletePod(pod.Name, pod.UID)
			return
		case <-r.ctx.Done():
			stopProbes()
			<-probesDone
			rp.mu.Lock()
			rp.proc.Process.Kill()
			rp.mu.Unlock()
			<-exited
			return
		}
	}
}

// terminate stops the container as a kubelet does: the preStop sleep, then
// SIGTERM, then SIGKILL once the grace period (counted from the start of
// preStop) is over.
func (r *podRunner) terminate(pod *corev1.Pod, rp *runPod, c *corev1.Container, grace int64, exited <-chan struct{}) {
	deadline := time.After(time.Duration(grace) * time.Second)
	if grace > 0 && c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		select {
		case <-time.After(time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second):
		case <-deadline:
		case <-exited:
		case <-r.ctx.Done():
		}
	}
	rp.mu.Lock()
	rp.proc.Process.Signal(syscall.SIGTERM)
	rp.mu.Unlock()
	select {
	case <-exited:
		return
	case <-deadline:
	case <-r.ctx.Done():
	}
	rp.mu.Lock()
	rp.proc.Process.Kill()
	rp.mu.Unlock()
	<-exited
}

// prepare lays out the pod's root (the program, /etc, the volumes) and
// returns the command line and environment of its container.
func (r *podRunner) prepare(pod *corev1.Pod, rp *runPod, c *corev1.Container) (argv, env []string, err error) {
	bin, ok := r.images[c.Image]
	if !ok {
		return nil, nil, fmt.Errorf("image %s: the pod runner maps no program to it", c.Image)
	}
	if len(c.Command) == 0 {
		return nil, nil, fmt.Errorf("container %s has no command (the runner does not read images' entry points)", c.Name)
	}
	// The root lives as long as the pod's name: a StatefulSet's pod keeps
	// its volumes across deletions, as its PersistentVolumeClaims do.
	rp.root = filepath.Join(r.dir, "roots", pod.Namespace+"_"+pod.Name)
	for _, d := range []string{"etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rp.root, d), 0o755); err != nil {
			return nil, nil, err
		}
	}
	os.Chmod(filepath.Join(rp.root, "tmp"), 0o1777)

	// The downward API and $(VAR) references, as the kubelet expands them.
	vars := map[string]string{}
	field := func(path string) (string, error) {
		switch path {
		case "metadata.name":
			return pod.Name, nil
		case "metadata.namespace":
			return pod.Namespace, nil
		case "metadata.uid":
			return string(pod.UID), nil
		case "status.podIP":
			return rp.ip, nil
		case "status.hostIP":
			return nodeIP, nil
		case "spec.nodeName":
			return nodeName, nil
		case "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, nil
		}
		return "", fmt.Errorf("fieldRef %s: not one the pod runner fills in", path)
	}
	for _, e := range c.Env {
		v := expand(e.Value, vars)
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				return nil, nil, fmt.Errorf("env %s: only fieldRef sources are supported", e.Name)
			}
			if v, err = field(e.ValueFrom.FieldRef.FieldPath); err != nil {
				return nil, nil, err
			}
		}
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	if pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks {
		return nil, nil, fmt.Errorf("pod %s enables service links, which the pod runner does not make", pod.Name)
	}
	for _, a := range c.Command {
		argv = append(argv, expand(a, vars))
	}
	for _, a := range c.Args {
		argv = append(argv, expand(a, vars))
	}

	// The program at the command's path.
	if err := placeProgram(bin, filepath.Join(rp.root, argv[0])); err != nil {
		return nil, nil, err
	}

	// /etc: the cluster's DNS, as the kubelet writes it for ClusterFirst.
	hostname, fqdn := pod.Name, ""
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	if pod.Spec.Subdomain != "" {
		fqdn = fmt.Sprintf("%s.%s.%s.svc.cluster.local ", hostname, pod.Spec.Subdomain, pod.Namespace)
	}
	etc := map[string]string{
		"resolv.conf":   fmt.Sprintf("search %s.svc.cluster.local svc.cluster.local cluster.local\nnameserver %s\noptions ndots:5\n", pod.Namespace, nodeIP),
		"hosts":         fmt.Sprintf("127.0.0.1 localhost\n%s %s%s\n", rp.ip, fqdn, hostname),
		"hostname":      hostname + "\n",
		"nsswitch.conf": "hosts: files dns\n",
	}
	for name, content := range etc {
		if err := os.WriteFile(filepath.Join(rp.root, "etc", name), []byte(content), 0o644); err != nil {
			return nil, nil, err
		}
	}

	// The volumes.
	sc := pod.Spec.SecurityContext
	fsGroup := -1
	if sc != nil && sc.FSGroup != nil {
		fsGroup = int(*sc.FSGroup)
	}
	for _, m := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == m.Name {
				vol = &pod.Spec.Volumes[i]
			}
		}
		dir := filepath.Join(rp.root, m.MountPath)
		if err := r.fillVolume(pod, vol, m, dir, fsGroup); err != nil {
			return nil, nil, fmt.Errorf("volume %s at %s: %w", m.Name, m.MountPath, err)
		}
	}
	return argv, env, nil
}

// fillVolume writes a volume's files into dir.
func (r *podRunner) fillVolume(pod *corev1.Pod, vol *corev1.Volume, m corev1.VolumeMount, dir string, fsGroup int) error {
	var files map[string][]byte
	mode := os.FileMode(0o644)
	var items []corev1.KeyToPath
	switch {
	case vol == nil:
		// A volumeClaimTemplate's claim: the StatefulSet controller names
		// the pod's volume after the claim; a directory that outlives
		// the pod stands for the claim's volume.
		return makeDataDir(dir, fsGroup)
	case vol.PersistentVolumeClaim != nil, vol.EmptyDir != nil:
		return makeDataDir(dir, fsGroup)
	case vol.ConfigMap != nil:
		cm, err := r.client.CoreV1().ConfigMaps(pod.Namespace).Get(r.ctx, vol.ConfigMap.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		files = map[string][]byte{}
		for k, v := range cm.Data {
			files[k] = []byte(v)
		}
		for k, v := range cm.BinaryData {
			files[k] = v
		}
		if vol.ConfigMap.DefaultMode != nil {
			mode = os.FileMode(*vol.ConfigMap.DefaultMode)
		}
		items = vol.ConfigMap.Items
	case vol.Secret != nil:
		s, err := r.client.CoreV1().Secrets(pod.Namespace).Get(r.ctx, vol.Secret.SecretName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		files = s.Data
		if vol.Secret.DefaultMode != nil {
			mode = os.FileMode(*vol.Secret.DefaultMode)
		}
		items = vol.Secret.Items
	default:
		return fmt.Errorf("a kind of volume the pod runner does not mount")
	}
	if len(items) > 0 {
		picked := map[string][]byte{}
		for _, it := range items {
			picked[it.Path] = files[it.Key]
		}
		files = picked
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, mode); err != nil {
			return err
		}
		if err := os.Chmod(path, mode); err != nil {
			return err
		}
		if fsGroup >= 0 {
			if err := os.Chown(path, 0, fsGroup); err != nil {
				return err
			}
		}
	}
	return nil
}

// makeDataDir makes a writable volume's directory, owned by the pod's
// fsGroup as the kubelet makes it, keeping what it holds.
func makeDataDir(dir string, fsGroup int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if fsGroup >= 0 {
		if err := os.Chown(dir, 0, fsGroup); err != nil {
			return err
		}
		return os.Chmod(dir, 0o2775)
	}
	return os.Chmod(dir, 0o777)
}

// placeProgram puts the image's program at path (a hard link where it can).
func placeProgram(bin, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	os.Remove(path)
	if os.Link(bin, path) == nil {
		return nil
	}
	in, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// expand replaces $(VAR) with vars[VAR] where VAR is defined, and $$ with
// $, as the kubelet expands command, args and env values.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteByte('$')
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// startContainer starts the container's process: in the pod's network
// namespace, chrooted into its root, as its user.
func (r *podRunner) startContainer(pod *corev1.Pod, rp *runPod, argv, env []string) (<-chan struct{}, error) {
	uid, gid := int64(0), int64(0)
	var groups []string
	if sc := pod.Spec.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		}
		if sc.FSGroup != nil {
			groups = append(groups, strconv.FormatInt(*sc.FSGroup, 10))
		}
		for _, g := range sc.SupplementalGroups {
			groups = append(groups, strconv.FormatInt(g, 10))
		}
	}
	if sc := pod.Spec.Containers[0].SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		}
	}
	args := []string{fmt.Sprintf("--userspec=%d:%d", uid, gid)}
	if len(groups) > 0 {
		args = append(args, "--groups="+strings.Join(groups, ","))
	}
	args = append(args, rp.root)
	args = append(args, argv...)
	cmd := rp.netns.command("/usr/sbin/chroot", args...)
	cmd.Env = env
	rp.mu.Lock()
	restarts := rp.restarts
	rp.mu.Unlock()
	logPath := filepath.Join(r.dir, "logs", fmt.Sprintf("%s_%s-%d.log", pod.Namespace, pod.Name, restarts))
	os.MkdirAll(filepath.Dir(logPath), 0o755)
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		f.Close()
		close(exited)
	}()
	rp.mu.Lock()
	rp.proc, rp.started = cmd, time.Now()
	rp.mu.Unlock()
	return exited, nil
}

// report writes the pod's status as the runner sees it now.
func (r *podRunner) report(pod *corev1.Pod, rp *runPod, waitingReason string) {
	rp.reportMu.Lock()
	defer rp.reportMu.Unlock()
	for range 5 {
		cur, err := r.client.CoreV1().Pods(pod.Namespace).Get(r.ctx, pod.Name, metav1.GetOptions{})
		if err != nil || cur.UID != rp.uid {
			return
		}
		rp.mu.Lock()
		ready, readySince, started, isStarted, restarts := rp.ready, rp.readySince, rp.started, rp.isStarted, rp.restarts
		rp.mu.Unlock()
		st := &cur.Status
		st.Phase = corev1.PodRunning
		st.HostIP, st.HostIPs = nodeIP, []corev1.HostIP{{IP: nodeIP}}
		st.PodIP, st.PodIPs = rp.ip, []corev1.PodIP{{IP: rp.ip}}
		if st.StartTime == nil {
			t := metav1.NewTime(started)
			st.StartTime = &t
		}
		cond := func(ok bool) corev1.ConditionStatus {
			if ok {
				return corev1.ConditionTrue
			}
			return corev1.ConditionFalse
		}
		since := metav1.NewTime(readySince)
		setCondition(st, corev1.PodScheduled, corev1.ConditionTrue, metav1.NewTime(started))
		setCondition(st, corev1.PodInitialized, corev1.ConditionTrue, metav1.NewTime(started))
		setCondition(st, corev1.ContainersReady, cond(ready), since)
		setCondition(st, corev1.PodReady, cond(ready), since)
		c := corev1.ContainerStatus{
			Name: pod.Spec.Containers[0].Name, Image: rp.image, ImageID: rp.image,
			Ready: ready, Started: &isStarted, RestartCount: restarts,
		}
		if waitingReason != "" {
			c.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: waitingReason}
		} else {
			c.ContainerID = fmt.Sprintf("podrunner://%s-%d", rp.uid, restarts)
			c.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}
		}
		st.ContainerStatuses = []corev1.ContainerStatus{c}
		_, err = r.client.CoreV1().Pods(pod.Namespace).UpdateStatus(r.ctx, cur, metav1.UpdateOptions{})
		if err == nil || !apierrors.IsConflict(err) {
			if err != nil && r.ctx.Err() == nil && !apierrors.IsNotFound(err) {
				r.logf("pod %s status: %v", pod.Name, err)
			}
			return
		}
	}
}

func setCondition(st *corev1.PodStatus, typ corev1.PodConditionType, status corev1.ConditionStatus, since metav1.Time) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			if st.Conditions[i].Status != status {
				st.Conditions[i].Status, st.Conditions[i].LastTransitionTime = status, since
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: typ, Status: status, LastTransitionTime: since})
}

// probe runs the container's startup probe, then its readiness and
// liveness probes, until ctx ends; a failed startup or liveness probe
// stops the process (which run then restarts).
func (r *podRunner) probe(ctx context.Context, pod *corev1.Pod, rp *runPod, c *corev1.Container) {
	if p := c.StartupProbe; p != nil {
		if !r.probeUntil(ctx, pod, rp, c, p, true) {
			return
		}
	}
	rp.mu.Lock()
	rp.isStarted = true
	if c.ReadinessProbe == nil {
		rp.ready, rp.readySince = true, time.Now()
	}
	rp.mu.Unlock()
	r.report(pod, rp, "")
	var wg sync.WaitGroup
	if p := c.LivenessProbe; p != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !r.probeUntil(ctx, pod, rp, c, p, false) && ctx.Err() == nil {
				r.logf("pod %s: liveness probe failed %d times: restarting", pod.Name, p.FailureThreshold)
				rp.mu.Lock()
				rp.proc.Process.Kill()
				rp.mu.Unlock()
			}
		}()
	}
	if p := c.ReadinessProbe; p != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.readiness(ctx, pod, rp, c, p)
		}()
	}
	wg.Wait()
}

// probeUntil runs p every period: with untilSuccess, until it succeeds
// (true) or fails FailureThreshold times in a row (false, after killing
// the process); else until it fails so (false) or ctx ends (true).
func (r *podRunner) probeUntil(ctx context.Context, pod *corev1.Pod, rp *runPod, c *corev1.Container, p *corev1.Probe, untilSuccess bool) bool {
	if !sleepCtx(ctx, time.Duration(p.InitialDelaySeconds)*time.Second) {
		return true
	}
	failures := int32(0)
	for {
		err := r.runProbe(ctx, rp, c, p)
		if ctx.Err() != nil {
			return true
		}
		if err == nil {
			failures = 0
			if untilSuccess {
				return true
			}
		} else if failures++; failures >= p.FailureThreshold {
			if untilSuccess {
				r.logf("pod %s: startup probe failed %d times (%v): restarting", pod.Name, failures, err)
				rp.mu.Lock()
				rp.proc.Process.Kill()
				rp.mu.Unlock()
			}
			return false
		}
		if !sleepCtx(ctx, time.Duration(p.PeriodSeconds)*time.Second) {
			return true
		}
	}
}

// readiness runs the readiness probe, reporting each change.
func (r *podRunner) readiness(ctx context.Context, pod *corev1.Pod, rp *runPod, c *corev1.Container, p *corev1.Probe) {
	if !sleepCtx(ctx, time.Duration(p.InitialDelaySeconds)*time.Second) {
		return
	}
	var successes, failures int32
	for {
		err := r.runProbe(ctx, rp, c, p)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			successes, failures = successes+1, 0
		} else {
			successes, failures = 0, failures+1
		}
		rp.mu.Lock()
		changed := false
		if !rp.ready && successes >= p.SuccessThreshold {
			rp.ready, rp.readySince, changed = true, time.Now(), true
		} else if rp.ready && failures >= p.FailureThreshold {
			rp.ready, rp.readySince, changed = false, time.Now(), true
		}
		rp.mu.Unlock()
		if changed {
			r.report(pod, rp, "")
		}
		if !sleepCtx(ctx, time.Duration(p.PeriodSeconds)*time.Second) {
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// runProbe runs one probe from the node, as the kubelet does.
func (r *podRunner) runProbe(ctx context.Context, rp *runPod, c *corev1.Container, p *corev1.Probe) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(max(p.TimeoutSeconds, 1))*time.Second)
	defer cancel()
	port := func(ps intstr.IntOrString) (string, error) {
		if ps.Type == intstr.Int {
			return strconv.Itoa(int(ps.IntVal)), nil
		}
		for _, cp := range c.Ports {
			if cp.Name == ps.StrVal {
				return strconv.Itoa(int(cp.ContainerPort)), nil
			}
		}
		return "", fmt.Errorf("no port named %s", ps.StrVal)
	}
	switch {
	case p.HTTPGet != nil:
		pt, err := port(p.HTTPGet.Port)
		if err != nil {
			return err
		}
		if p.HTTPGet.Scheme != "" && p.HTTPGet.Scheme != corev1.URISchemeHTTP {
			return fmt.Errorf("scheme %s: the pod runner probes HTTP only", p.HTTPGet.Scheme)
		}
		client := &http.Client{Transport: &http.Transport{DialContext: r.node.dial, DisableKeepAlives: true}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(rp.ip, pt)+p.HTTPGet.Path, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	case p.GRPC != nil:
		addr := net.JoinHostPort(rp.ip, strconv.Itoa(int(p.GRPC.Port)))
		conn, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return r.node.dial(ctx, "tcp", a) }))
		if err != nil {
			return err
		}
		defer conn.Close()
		svc := ""
		if p.GRPC.Service != nil {
			svc = *p.GRPC.Service
		}
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			return err
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("gRPC health %v", resp.Status)
		}
		return nil
	case p.TCPSocket != nil:
		pt, err := port(p.TCPSocket.Port)
		if err != nil {
			return err
		}
		conn, err := r.node.dial(ctx, "tcp", net.JoinHostPort(rp.ip, pt))
		if err != nil {
			return err
		}
		return conn.Close()
	}
	return errors.New("a kind of probe the pod runner does not run")
}

// lookup returns the running pod named name, or nil.
func (r *podRunner) lookup(name string) *runPod {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rp := range r.pods {
		if rp.name == name {
			return rp
		}
	}
	return nil
}

// pid is the pod's process's.
func (rp *runPod) pid() int {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.proc == nil || rp.proc.Process == nil {
		return 0
	}
	return rp.proc.Process.Pid
}

// serviceProxy is a stand-in for kube-proxy: for each Service of the
// namespace with a ClusterIP, it puts the ClusterIP on the node's loopback
// and forwards each TCP connection to one of the Service's ready
// endpoints, picked at random, as kube-proxy's rules do.
type serviceProxy struct {
	client    kubernetes.Interface
	node      *netns
	namespace string
	logf      func(string, ...any)

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	factory informers.SharedInformerFactory
	slices  cache.Store

	mu        sync.Mutex
	listeners map[string]net.Listener // "ip:port/proto"
	conns     map[net.Conn]bool
}

func startServiceProxy(ctx context.Context, client kubernetes.Interface, node *netns, namespace string, logf func(string, ...any)) *serviceProxy {
	p := &serviceProxy{client: client, node: node, namespace: namespace, logf: logf,
		listeners: map[string]net.Listener{}, conns: map[net.Conn]bool{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	svcInf := p.factory.Core().V1().Services().Informer()
	svcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.open(obj.(*corev1.Service)) },
		UpdateFunc: func(_, obj any) { p.open(obj.(*corev1.Service)) },
	})
	p.slices = p.factory.Discovery().V1().EndpointSlices().Informer().GetStore()
	p.factory.Start(p.ctx.Done())
	p.factory.WaitForCacheSync(ctx.Done())
	return p
}

func (p *serviceProxy) stop() {
	p.cancel()
	p.mu.Lock()
	for _, l := range p.listeners {
		l.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.factory.Shutdown()
}

// open listens on the Service's ClusterIP ports it does not listen on yet.
func (p *serviceProxy) open(svc *corev1.Service) {
	ip := svc.Spec.ClusterIP
	if ip == "" || ip == corev1.ClusterIPNone {
		return
	}
	for _, sp := range svc.Spec.Ports {
		if sp.Protocol != corev1.ProtocolTCP {
			continue
		}
		key := net.JoinHostPort(ip, strconv.Itoa(int(sp.Port)))
		p.mu.Lock()
		_, ok := p.listeners[key]
		p.mu.Unlock()
		if ok || p.ctx.Err() != nil {
			continue
		}
		if err := p.node.ip("addr", "replace", ip+"/32", "dev", "lo"); err != nil {
			p.logf("service %s: %v", svc.Name, err)
			return
		}
		l, err := p.node.listen("tcp", key)
		if err != nil {
			p.logf("service %s: %v", svc.Name, err)
			continue
		}
		p.mu.Lock()
		p.listeners[key] = l
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(l, svc.Name, sp.Name)
	}
}

// endpoints are the ready addresses of the Service's port portName.
func (p *serviceProxy) endpoints(service, portName string) []string {
	var out []string
	for _, obj := range p.slices.List() {
		s := obj.(*discoveryv1.EndpointSlice)
		if s.Labels[discoveryv1.LabelServiceName] != service {
			continue
		}
		var port int32 = -1
		for _, sp := range s.Ports {
			if sp.Name != nil && *sp.Name == portName && sp.Port != nil {
				port = *sp.Port
			}
		}
		if port < 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	sort.Strings(out)
	return out
}

func (p *serviceProxy) serve(l net.Listener, service, portName string) {
	defer p.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		eps := p.endpoints(service, portName)
		if len(eps) == 0 {
			c.Close()
			continue
		}
		target := eps[rand.IntN(len(eps))]
		p.mu.Lock()
		p.conns[c] = true
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() {
				p.mu.Lock()
				delete(p.conns, c)
				p.mu.Unlock()
				c.Close()
			}()
			ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
			up, err := p.node.dial(ctx, "tcp", target)
			cancel()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns[up] = true
			p.mu.Unlock()
			defer func() {
				p.mu.Lock()
				delete(p.conns, up)
				p.mu.Unlock()
				up.Close()
			}()
			done := make(chan struct{})
			go func() {
				io.Copy(up, c)
				up.(*net.TCPConn).CloseWrite()
				close(done)
			}()
			io.Copy(c, up)
			c.(*net.TCPConn).CloseWrite()
			<-done
		}()
	}
}
