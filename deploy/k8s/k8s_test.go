package k8s_test

// These tests render every kustomization under deploy/k8s with the kustomize
// Go API, decode each object strictly into the typed Kubernetes API structs,
// and check that the manifests agree with the silo they run: its flags, its
// ports, its HTTP endpoints, its shutdown timeout.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// variant is what one kustomization is expected to deploy.
type variant struct {
	// etcd: the rendering holds the etcd StatefulSet the silos point at;
	// otherwise the silos point at an etcd outside the rendering.
	etcd bool
	// tls: the gateway serves TLS (--tls-*), so readiness uses /readyz.
	tls bool
	// external names Secrets and ConfigMaps the user creates beside the
	// rendering (documented in the kustomization that needs them).
	external []string
}

// variants lists every kustomization under this directory (TestEveryKustomizationIsChecked).
var variants = map[string]variant{
	"base":                   {etcd: true},
	"overlays/external-etcd": {external: []string{"silo-etcd-client"}},
	"overlays/tls":           {etcd: true, tls: true, external: []string{"silo-tls"}},
}

// siloFlags are the silo's flags with their defaults, read from the -help
// output of the real program.
type siloFlags map[string]string

func readSiloFlags(t *testing.T) siloFlags {
	t.Helper()
	bin := buildRoot(t, "./cmd/silo")
	// -help exits 0 today; a non-zero exit is fine as long as it lists the
	// flags, which is checked below.
	out, helpErr := exec.Command(bin, "-help").CombinedOutput()
	// flag.PrintDefaults: "  -name type" (or "  -name" for a bool), then
	// the usage on the following lines, ending in "(default V)" when the
	// default is not the zero value.
	flagLine := regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9-]*)(?:\s|$)`)
	deflt := regexp.MustCompile(`\(default "?([^")]*)"?\)\s*$`)
	flags := siloFlags{}
	cur := ""
	for line := range strings.Lines(string(out)) {
		line = strings.TrimRight(line, "\n")
		if m := flagLine.FindStringSubmatch(line); m != nil {
			cur = m[1]
			flags[cur] = ""
		}
		if m := deflt.FindStringSubmatch(line); m != nil && cur != "" {
			flags[cur] = m[1]
		}
	}
	for _, want := range []string{"name", "gateway-addr", "http-addr", "shutdown-timeout"} {
		if _, ok := flags[want]; !ok {
			t.Fatalf("silo -help (exit: %v) lists no -%s: the help format changed?\n%s", helpErr, want, out)
		}
	}
	return flags
}

// repoRoot is the agentsilo repository, whose root module holds the silo.
// This directory is a module of its own (so that Kubernetes stays out of
// the root module's requirements), and it imports nothing of the root
// module: it builds the root module's programs with the go command, run
// from the root.
const repoRoot = "../.."

// buildRoot builds the main package pkg of the root module (such as
// ./cmd/silo) and returns the binary's path.
func buildRoot(t *testing.T, pkg string) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s (in %s): %v\n%s", pkg, root, err, out)
	}
	return bin
}

// httpPaths returns the HTTP paths the silo serves: the patterns given to
// Handle and HandleFunc anywhere in the root module's non-test code.
func httpPaths(t *testing.T) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != repoRoot || d.Name() == "testdata" || d.Name() == "data") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc" {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			pattern, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			// "GET /healthz" -> "/healthz"
			if _, p, ok := strings.Cut(pattern, " "); ok {
				pattern = p
			}
			paths = append(paths, pattern)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(paths, "/healthz") {
		t.Fatalf("found no handler for /healthz in the root module (found %v)", paths)
	}
	return paths
}

// objects is one rendering, decoded.
type objects struct {
	statefulSets map[string]*appsv1.StatefulSet
	services     map[string]*corev1.Service
	pdbs         map[string]*policyv1.PodDisruptionBudget
	netpols      map[string]*networkingv1.NetworkPolicy
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
}

// render builds the kustomization in dir and decodes every object strictly
// (unknown or duplicate fields, or a kind outside this list, fail).
func render(t *testing.T, dir string) *objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	o := &objects{
		statefulSets: map[string]*appsv1.StatefulSet{},
		services:     map[string]*corev1.Service{},
		pdbs:         map[string]*policyv1.PodDisruptionBudget{},
		netpols:      map[string]*networkingv1.NetworkPolicy{},
		configMaps:   map[string]*corev1.ConfigMap{},
		secrets:      map[string]*corev1.Secret{},
	}
	for _, r := range rm.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %v", r.CurId(), err)
		}
		gvk := r.GetGvk()
		key := gvk.ApiVersion() + " " + gvk.Kind
		name := r.GetName()
		var obj any
		switch key {
		case "apps/v1 StatefulSet":
			v := &appsv1.StatefulSet{}
			o.statefulSets[name], obj = v, v
		case "v1 Service":
			v := &corev1.Service{}
			o.services[name], obj = v, v
		case "policy/v1 PodDisruptionBudget":
			v := &policyv1.PodDisruptionBudget{}
			o.pdbs[name], obj = v, v
		case "networking.k8s.io/v1 NetworkPolicy":
			v := &networkingv1.NetworkPolicy{}
			o.netpols[name], obj = v, v
		case "v1 ConfigMap":
			v := &corev1.ConfigMap{}
			o.configMaps[name], obj = v, v
		case "v1 Secret":
			v := &corev1.Secret{}
			o.secrets[name], obj = v, v
		default:
			t.Errorf("%s: %s %s is not a kind this test knows; teach it the kind and its checks", dir, key, name)
			continue
		}
		strict, err := kjson.UnmarshalStrict(data, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err != nil {
			t.Fatalf("%s: %s %s: %v", dir, key, name, err)
		}
		for _, e := range strict {
			t.Errorf("%s: %s %s: %v", dir, key, name, e)
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("%s: %s name %q: %v", dir, key, name, errs)
		}
	}
	return o
}

// TestEveryKustomizationIsChecked: each kustomization under this directory
// is in variants, so none goes unrendered.
func TestEveryKustomizationIsChecked(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var head struct{ Kind string }
		if err := yaml.Unmarshal(data, &head); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		switch head.Kind {
		case "Kustomization":
			if _, ok := variants[dir]; !ok {
				t.Errorf("%s is not in variants: add it with what it should deploy", dir)
			}
		case "Component":
			used := false
			for v := range variants {
				k, err := os.ReadFile(filepath.Join(v, "kustomization.yaml"))
				if err != nil {
					return err
				}
				var kust struct{ Components []string }
				if err := yaml.Unmarshal(k, &kust); err != nil {
					return err
				}
				for _, c := range kust.Components {
					used = used || filepath.Clean(filepath.Join(v, c)) == filepath.Clean(dir)
				}
			}
			if !used {
				t.Errorf("component %s is used by none of the checked kustomizations", dir)
			}
		default:
			t.Errorf("%s: kind %q", path, head.Kind)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestKustomizations(t *testing.T) {
	flags := readSiloFlags(t)
	paths := httpPaths(t)
	// A copy of this directory with a key file, as make-keys.sh writes it
	// (the repository has none: TestKeysMustBeMade).
	tr := newTree(t, "alice", "ops:admins")
	for dir, want := range variants {
		t.Run(dir, func(t *testing.T) {
			o := render(t, filepath.Join(tr.dir, dir))
			checkKeySecret(t, o, tr.keyFile)
			checkSilo(t, o, want, flags, paths)
			checkSelectors(t, o)
			checkServicePorts(t, o)
			checkSiloNetworkPolicy(t, o)
			for _, s := range o.statefulSets {
				checkPod(t, s, o, want)
			}
			if want.etcd {
				checkEtcd(t, o)
			} else if _, ok := o.statefulSets["etcd"]; ok {
				t.Errorf("a StatefulSet etcd is rendered, but this variant uses an external etcd")
			}
		})
	}
}

// siloArgs are the silo container's flags, with $(VAR) references resolved.
type siloArgs map[string]string

func (a siloArgs) port(t *testing.T, flag string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(a[flag])
	if err != nil {
		t.Fatalf("--%s=%s: %v", flag, a[flag], err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		t.Fatalf("--%s=%s: port: %v", flag, a[flag], err)
	}
	return int32(n)
}

// parseArgs reads --flag=value arguments, checks each against the silo's
// flags, and resolves $(VAR) against the container's environment as the
// kubelet does (a downward-API variable becomes <VAR>).
func parseArgs(t *testing.T, c *corev1.Container, flags siloFlags) siloArgs {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil:
			env[e.Name] = "<" + e.Name + ">"
		default:
			env[e.Name] = e.Value
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	args := siloArgs{}
	for _, a := range c.Args {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || name == "" {
			t.Errorf("silo argument %q: want --flag=value", a)
			continue
		}
		if _, ok := flags[name]; !ok {
			t.Errorf("silo argument %q: the silo has no flag --%s", a, name)
		}
		if _, dup := args[name]; dup {
			t.Errorf("silo flag --%s given twice", name)
		}
		if !hasValue {
			value = "true"
		}
		value = ref.ReplaceAllStringFunc(value, func(s string) string {
			v := ref.FindStringSubmatch(s)[1]
			val, ok := env[v]
			if !ok {
				t.Errorf("silo argument %q: $(%s) is not in the container's environment, so the kubelet would pass it literally", a, v)
			}
			return val
		})
		args[name] = value
	}
	return args
}

// containerPort finds the port a probe or Service names (by name or
// number) among c's ports.
func containerPort(c *corev1.Container, p intstr.IntOrString, proto corev1.Protocol) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		pp := cp.Protocol
		if pp == "" {
			pp = corev1.ProtocolTCP
		}
		if pp != proto {
			continue
		}
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

func container(t *testing.T, s *appsv1.StatefulSet, name string) *corev1.Container {
	t.Helper()
	for i := range s.Spec.Template.Spec.Containers {
		if c := &s.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("StatefulSet %s has no container %s", s.Name, name)
	return nil
}

func envVar(c *corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func checkSilo(t *testing.T, o *objects, want variant, flags siloFlags, paths []string) {
	s, ok := o.statefulSets["silo"]
	if !ok {
		t.Fatal("no StatefulSet silo")
	}
	if s.Spec.Replicas == nil || *s.Spec.Replicas != 3 {
		t.Errorf("silo replicas = %v, want 3", s.Spec.Replicas)
	}
	if len(s.Spec.VolumeClaimTemplates) > 0 {
		t.Errorf("silo has volumeClaimTemplates, but a silo keeps no state of its own (etcd does)")
	}
	pod := &s.Spec.Template.Spec
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("silo pods must set enableServiceLinks: false: service links add SILO_* variables, and the silo reads its flags from SILO_* variables")
	}
	c := container(t, s, "silo")
	args := parseArgs(t, c, flags)

	// Identity from the downward API.
	fieldFrom := func(flag, env, field string) {
		if args[flag] != "<"+env+">" {
			t.Errorf("--%s=%q, want $(%s)", flag, args[flag], env)
			return
		}
		e, _ := envVar(c, env)
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
			t.Errorf("env %s does not come from the downward API's %s", env, field)
		}
	}
	fieldFrom("name", "POD_NAME", "metadata.name")
	fieldFrom("advertise-addr", "POD_IP", "status.podIP")

	// Listen addresses: all interfaces, each port declared once under its
	// name, and no declared port without a listener.
	listeners := []struct {
		flag, port string
		protos     []corev1.Protocol
	}{
		{"gateway-addr", "gateway", []corev1.Protocol{corev1.ProtocolTCP}},
		{"peer-addr", "peer", []corev1.Protocol{corev1.ProtocolTCP}},
		{"gossip-addr", "gossip", []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}},
		{"http-addr", "http", []corev1.Protocol{corev1.ProtocolTCP}},
	}
	declared := map[string]bool{}
	for _, l := range listeners {
		if _, ok := args[l.flag]; !ok {
			t.Errorf("no --%s: its default listens on loopback only", l.flag)
			continue
		}
		if host, _, _ := net.SplitHostPort(args[l.flag]); host != "0.0.0.0" && host != "" && host != "::" {
			t.Errorf("--%s=%s: want all interfaces (0.0.0.0)", l.flag, args[l.flag])
		}
		port := args.port(t, l.flag)
		for _, proto := range l.protos {
			cp, ok := containerPort(c, intstr.FromInt32(port), proto)
			if !ok {
				t.Errorf("--%s=%s: no %s containerPort %d", l.flag, args[l.flag], proto, port)
				continue
			}
			declared[cp.Name] = true
			if proto == corev1.ProtocolTCP && cp.Name != l.port {
				t.Errorf("containerPort %d is named %q, want %q", port, cp.Name, l.port)
			}
		}
	}
	for _, cp := range c.Ports {
		if !declared[cp.Name] {
			t.Errorf("containerPort %s (%d) has no silo listener", cp.Name, cp.ContainerPort)
		}
	}
	gatewayPort, httpPort := args.port(t, "gateway-addr"), args.port(t, "http-addr")

	// --join: a headless Service over the silos that publishes not-ready
	// pods, governing the StatefulSet, on the gossip port.
	joinHost, joinPort, err := net.SplitHostPort(args["join"])
	if err != nil {
		t.Errorf("--join=%q: want service:port: %v", args["join"], err)
	} else {
		svcName, _, _ := strings.Cut(joinHost, ".")
		svc, ok := o.services[svcName]
		switch {
		case !ok:
			t.Errorf("--join=%s: no Service %s", args["join"], svcName)
		case svc.Spec.ClusterIP != corev1.ClusterIPNone:
			t.Errorf("--join Service %s is not headless: its name would resolve to one virtual IP, not to every silo", svcName)
		case !svc.Spec.PublishNotReadyAddresses:
			t.Errorf("--join Service %s does not publish not-ready addresses: a starting silo (not ready until it has joined) could find no seeds", svcName)
		case !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)):
			t.Errorf("--join Service %s does not select the silo pods", svcName)
		}
		if s.Spec.ServiceName != svcName {
			t.Errorf("silo serviceName = %q, want the --join Service %q", s.Spec.ServiceName, svcName)
		}
		if joinPort != strconv.Itoa(int(args.port(t, "gossip-addr"))) {
			t.Errorf("--join port %s is not the gossip port of --gossip-addr=%s", joinPort, args["gossip-addr"])
		}
	}

	// etcd: always an external one (never the embedded etcd, whose data
	// would sit on a read-only root filesystem).
	if _, ok := args["data-dir"]; ok {
		t.Errorf("--data-dir is given, but only an embedded etcd uses it")
	}
	endpoints := strings.Split(args["etcd-endpoints"], ",")
	if args["etcd-endpoints"] == "" {
		t.Errorf("no --etcd-endpoints: the silo would run an embedded etcd")
		endpoints = nil
	}
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" || u.Port() == "" {
			t.Errorf("--etcd-endpoints: %q is not scheme://host:port", ep)
			continue
		}
		if u.Scheme != "https" {
			t.Errorf("--etcd-endpoints: %s is not https: the silos speak TLS to etcd", ep)
		}
		if want.etcd {
			checkEtcdEndpoint(t, o, u)
		} else if sts, _, _ := strings.Cut(u.Hostname(), "-"); o.statefulSets[sts] != nil {
			t.Errorf("--etcd-endpoints: %s names a StatefulSet of this rendering, but this variant uses an external etcd", ep)
		}
	}
	if p := args["etcd-prefix"]; p != "" && !strings.HasSuffix(p, "/") {
		t.Errorf("--etcd-prefix=%s: end it with /", p)
	}

	// Probes: readiness from the gateway's gRPC health service (it turns
	// SERVING once the silo is in the view), or /readyz where the gateway
	// speaks TLS; liveness and startup from /healthz.
	probe := func(what string, p *corev1.Probe) *corev1.ProbeHandler {
		if p == nil {
			t.Errorf("silo has no %s probe", what)
			return nil
		}
		n := 0
		for _, set := range []bool{p.Exec != nil, p.HTTPGet != nil, p.TCPSocket != nil, p.GRPC != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			t.Errorf("silo %s probe has %d handlers, want 1", what, n)
		}
		if p.HTTPGet != nil {
			if _, ok := containerPort(c, p.HTTPGet.Port, corev1.ProtocolTCP); !ok {
				t.Errorf("silo %s probe: port %s is not a containerPort", what, p.HTTPGet.Port.String())
			}
			if cp, _ := containerPort(c, p.HTTPGet.Port, corev1.ProtocolTCP); cp.ContainerPort != httpPort {
				t.Errorf("silo %s probe: port %s is not --http-addr's", what, p.HTTPGet.Port.String())
			}
			if !slices.Contains(paths, p.HTTPGet.Path) {
				t.Errorf("silo %s probe: the silo serves no %s (it serves %v)", what, p.HTTPGet.Path, paths)
			}
		}
		return &p.ProbeHandler
	}
	if h := probe("readiness", c.ReadinessProbe); h != nil {
		switch {
		case want.tls:
			if h.HTTPGet == nil || h.HTTPGet.Path != "/readyz" {
				t.Errorf("silo readiness: with TLS on the gateway, want httpGet /readyz (the kubelet's gRPC probe has no TLS)")
			}
		case h.GRPC == nil:
			t.Errorf("silo readiness: want the gRPC health probe on the gateway port")
		case h.GRPC.Port != gatewayPort:
			t.Errorf("silo readiness: gRPC probe on port %d, gateway on %d", h.GRPC.Port, gatewayPort)
		case h.GRPC.Service != nil && *h.GRPC.Service != "" && *h.GRPC.Service != "agentsilo.v1.Gateway":
			t.Errorf("silo readiness: gRPC service %q is not one the gateway reports", *h.GRPC.Service)
		}
	}
	if h := probe("liveness", c.LivenessProbe); h != nil && (h.HTTPGet == nil || h.HTTPGet.Path != "/healthz") {
		t.Errorf("silo liveness: want httpGet /healthz")
	}
	if c.StartupProbe != nil {
		if h := probe("startup", c.StartupProbe); h != nil && (h.HTTPGet == nil || h.HTTPGet.Path != "/healthz") {
			t.Errorf("silo startup: want httpGet /healthz")
		}
	}

	// Shutdown: the grace period covers the preStop hook and the silo's own
	// --shutdown-timeout, with room to spare.
	shutdown := args["shutdown-timeout"]
	if shutdown == "" {
		shutdown = flags["shutdown-timeout"]
	}
	d, err := time.ParseDuration(shutdown)
	if err != nil {
		t.Fatalf("--shutdown-timeout=%q: %v", shutdown, err)
	}
	var preStop time.Duration
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		t.Errorf("silo has no preStop hook: SIGTERM could arrive before the pod leaves the gateway Service")
	} else if sl := c.Lifecycle.PreStop.Sleep; sl != nil {
		preStop = time.Duration(sl.Seconds) * time.Second
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= preStop+d {
		t.Errorf("terminationGracePeriodSeconds is not above preStop %v + --shutdown-timeout %v", preStop, d)
	}

	// Files: each lies in a mounted volume, under a key that the ConfigMap
	// or Secret has; the ACL seed and the key file parse; the silos' own
	// credentials (peer TLS, gossip key, etcd client) are always there.
	files := map[string][]byte{}
	for _, flag := range []string{"acl-file", "auth-file", "tls-cert", "tls-key", "tls-client-ca",
		"peer-tls-cert", "peer-tls-key", "peer-tls-ca", "gossip-key-file", "etcd-ca", "etcd-cert", "etcd-key"} {
		path, ok := args[flag]
		if wantFlag := !strings.HasPrefix(flag, "tls-") || want.tls; ok != wantFlag {
			t.Errorf("--%s given: %v, want %v", flag, ok, wantFlag)
		}
		if !ok {
			continue
		}
		data, ok := mountedFile(t, s, c, o, want, path)
		if ok {
			files[flag] = data
		}
		switch {
		case !ok:
		case flag == "acl-file":
			checkACL(t, data)
		case flag == "auth-file":
			checkKeys(t, data)
		}
	}
	if _, ok := args["insecure"]; ok {
		t.Errorf("--insecure is set: the gateway would accept self-declared principals, and the peer and gossip ports anyone")
	}
	checkSiloCredentials(t, args, files)
	if want.etcd {
		checkEtcdTLS(t, o, args, files)
	}

	// GOMEMLIMIT below the memory limit.
	if e, ok := envVar(c, "GOMEMLIMIT"); ok {
		soft, err := parseGoBytes(e.Value)
		lim := c.Resources.Limits.Memory()
		if err != nil {
			t.Errorf("GOMEMLIMIT=%q: %v", e.Value, err)
		} else if lim.IsZero() || soft >= lim.Value() {
			t.Errorf("GOMEMLIMIT=%s is not below the memory limit %s", e.Value, lim)
		}
	}

	// The gateway Service: a ClusterIP Service on the gateway port.
	found := false
	for _, svc := range o.services {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if cp, ok := containerPort(c, sp.TargetPort, corev1.ProtocolTCP); ok && cp.ContainerPort == gatewayPort {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no ClusterIP Service selects the silos on the gateway port %d", gatewayPort)
	}

	// At most one silo down for a voluntary disruption.
	found = false
	for _, pdb := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(s.Spec.Template.Labels)) {
			continue
		}
		found = true
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.String() != "1" || pdb.Spec.MinAvailable != nil {
			t.Errorf("PodDisruptionBudget %s: want maxUnavailable 1 only", pdb.Name)
		}
	}
	if !found {
		t.Errorf("no PodDisruptionBudget covers the silos")
	}
}

// mountedFile returns the content of the file at path in container c of s,
// from the ConfigMap or Secret mounted there; ok is false if it is not
// known (a missing file is reported, an external Secret is not).
func mountedFile(t *testing.T, s *appsv1.StatefulSet, c *corev1.Container, o *objects, want variant, path string) ([]byte, bool) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		dir := strings.TrimSuffix(m.MountPath, "/") + "/"
		if !strings.HasPrefix(path, dir) || m.SubPath != "" {
			continue
		}
		key := strings.TrimPrefix(path, dir)
		for _, v := range s.Spec.Template.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			switch {
			case v.ConfigMap != nil:
				if cm, ok := o.configMaps[v.ConfigMap.Name]; ok {
					if d, ok := cm.Data[key]; ok {
						return []byte(d), true
					}
					t.Errorf("%s: ConfigMap %s has no key %s", path, cm.Name, key)
				}
			case v.Secret != nil:
				if sec, ok := o.secrets[v.Secret.SecretName]; ok {
					if d, ok := sec.Data[key]; ok {
						return d, true
					}
					t.Errorf("%s: Secret %s has no key %s", path, sec.Name, key)
				} else if !slices.Contains(want.external, v.Secret.SecretName) {
					t.Errorf("%s: Secret %s is not rendered", path, v.Secret.SecretName)
				}
			default:
				t.Errorf("%s: volume %s is neither a ConfigMap nor a Secret", path, v.Name)
			}
			return nil, false
		}
	}
	t.Errorf("%s is in no mounted volume of container %s", path, c.Name)
	return nil, false
}

// checkACL: FabrCore's Acl section.
func checkACL(t *testing.T, data []byte) {
	t.Helper()
	var acl struct {
		Rules []struct {
			OwnerPattern, AgentPattern, CallerPattern, Permission string
		}
		Groups map[string][]string
	}
	if err := strictJSON(data, &acl); err != nil {
		t.Errorf("ACL seed: %v", err)
		return
	}
	if len(acl.Rules) == 0 {
		t.Errorf("ACL seed has no rules")
	}
	for i, r := range acl.Rules {
		if r.OwnerPattern == "" || r.AgentPattern == "" || r.CallerPattern == "" {
			t.Errorf("ACL seed rule %d: empty pattern: %+v", i, r)
		}
		for p := range strings.SplitSeq(r.Permission, ",") {
			if !slices.Contains([]string{"Message", "Configure", "Read", "Admin", "All"}, strings.TrimSpace(p)) {
				t.Errorf("ACL seed rule %d: permission %q: want Message, Configure, Read, Admin or All", i, p)
			}
		}
	}
}

// checkKeys: the API-key file.
func checkKeys(t *testing.T, data []byte) {
	t.Helper()
	var f struct {
		Keys []struct {
			SHA256    string   `json:"sha256"`
			Principal string   `json:"principal"`
			Groups    []string `json:"groups"`
		} `json:"keys"`
	}
	if err := strictJSON(data, &f); err != nil {
		t.Errorf("API-key file: %v", err)
		return
	}
	if len(f.Keys) == 0 {
		t.Errorf("API-key file has no keys: the silo refuses to start with it")
	}
	hex := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for i, k := range f.Keys {
		if !hex.MatchString(k.SHA256) {
			t.Errorf("API key %d: sha256 %q is not 64 lower-case hex digits", i, k.SHA256)
		}
		if !validName.MatchString(k.Principal) {
			t.Errorf("API key %d: principal %q is not a valid name", i, k.Principal)
		}
		for _, g := range k.Groups {
			if !validName.MatchString(g) {
				t.Errorf("API key %d: group %q is not a valid name", i, g)
			}
		}
	}
}

// validName is what the silo accepts as a principal or group
// (grain.ValidName).
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$`)

func strictJSON(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("more than one JSON value")
	}
	return nil
}

// parseGoBytes reads a GOMEMLIMIT value: bytes, optionally with B, KiB,
// MiB, GiB or TiB.
func parseGoBytes(s string) (int64, error) {
	for i, unit := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if n, ok := strings.CutSuffix(s, unit); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v << (10 * (4 - i)), err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// checkEtcdEndpoint: an endpoint of the rendered etcd names one of its
// members through the StatefulSet's headless Service, on its client port.
func checkEtcdEndpoint(t *testing.T, o *objects, u *url.URL) {
	t.Helper()
	parts := strings.Split(u.Hostname(), ".")
	member, svcName := parts[0], ""
	if len(parts) > 1 {
		svcName = parts[1]
	}
	i := strings.LastIndex(member, "-")
	if i < 0 {
		t.Errorf("etcd endpoint %s: want <statefulset>-<ordinal>.<service>", u)
		return
	}
	sts, ok := o.statefulSets[member[:i]]
	if !ok {
		t.Errorf("etcd endpoint %s: no StatefulSet %s", u, member[:i])
		return
	}
	if n, err := strconv.Atoi(member[i+1:]); err != nil || sts.Spec.Replicas == nil || n >= int(*sts.Spec.Replicas) {
		t.Errorf("etcd endpoint %s: %s is not a pod of StatefulSet %s", u, member, sts.Name)
	}
	if svcName != sts.Spec.ServiceName {
		t.Errorf("etcd endpoint %s: want the governing Service %s of StatefulSet %s", u, sts.Spec.ServiceName, sts.Name)
	}
	port, _ := strconv.ParseInt(u.Port(), 10, 32)
	if cp, ok := containerPort(&sts.Spec.Template.Spec.Containers[0], intstr.FromInt32(int32(port)), corev1.ProtocolTCP); !ok || cp.Name != "client" {
		t.Errorf("etcd endpoint %s: port %s is not the client port of %s", u, u.Port(), sts.Name)
	}
}

// checkEtcd: the rendered etcd cluster is consistent with itself.
func checkEtcd(t *testing.T, o *objects) {
	t.Helper()
	sts, ok := o.statefulSets["etcd"]
	if !ok {
		t.Fatal("no StatefulSet etcd")
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("etcd replicas = %v, want 3", sts.Spec.Replicas)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("etcd podManagementPolicy = %q: with OrderedReady the first member waits forever for a quorum", sts.Spec.PodManagementPolicy)
	}
	if pod := sts.Spec.Template.Spec; pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("etcd pods must set enableServiceLinks: false: etcd reads ETCD_* variables as flags")
	}
	svc, ok := o.services[sts.Spec.ServiceName]
	if !ok || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("etcd's governing Service %q must exist, be headless and publish not-ready addresses", sts.Spec.ServiceName)
	}
	c := container(t, sts, "etcd")
	var cluster []string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--initial-cluster="); ok {
			cluster = strings.Split(v, ",")
		}
	}
	if sts.Spec.Replicas != nil && len(cluster) != int(*sts.Spec.Replicas) {
		t.Errorf("etcd --initial-cluster has %d members, replicas %v", len(cluster), *sts.Spec.Replicas)
	}
	for i, m := range cluster {
		name := fmt.Sprintf("%s-%d", sts.Name, i)
		if want := fmt.Sprintf("%s=https://%s.%s:", name, name, sts.Spec.ServiceName); !strings.HasPrefix(m, want) {
			t.Errorf("etcd --initial-cluster member %q: want %s<peer port>", m, want)
			continue
		}
		port, _ := strconv.ParseInt(m[strings.LastIndex(m, ":")+1:], 10, 32)
		if cp, ok := containerPort(c, intstr.FromInt32(int32(port)), corev1.ProtocolTCP); !ok || cp.Name != "peer" {
			t.Errorf("etcd --initial-cluster member %q: not the peer port", m)
		}
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("etcd needs httpGet readiness and liveness probes")
		} else if _, ok := containerPort(c, p.HTTPGet.Port, corev1.ProtocolTCP); !ok {
			t.Errorf("etcd probe port %s is not a containerPort", p.HTTPGet.Port.String())
		}
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Errorf("etcd needs one volumeClaimTemplate for its data")
	}
	found := false
	for _, pdb := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err == nil && sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
			found = pdb.Spec.MaxUnavailable != nil && pdb.Spec.MaxUnavailable.String() == "1"
		}
	}
	if !found {
		t.Errorf("no PodDisruptionBudget with maxUnavailable 1 keeps etcd's quorum")
	}
	for _, p := range etcdPolicyProblems(o) {
		t.Error(p)
	}
}

// checkSelectors: each StatefulSet selects its own pods, and each Service
// and PodDisruptionBudget selects the pods of exactly one StatefulSet.
func checkSelectors(t *testing.T, o *objects) {
	t.Helper()
	for _, s := range o.statefulSets {
		sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(s.Spec.Template.Labels)) {
			t.Errorf("StatefulSet %s: selector %v does not select its pod template labels %v", s.Name, s.Spec.Selector, s.Spec.Template.Labels)
		}
		if a := s.Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil {
			t.Errorf("StatefulSet %s: no pod anti-affinity", s.Name)
		} else {
			for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				sel, err := metav1.LabelSelectorAsSelector(w.PodAffinityTerm.LabelSelector)
				if err != nil || !sel.Matches(labels.Set(s.Spec.Template.Labels)) {
					t.Errorf("StatefulSet %s: anti-affinity term does not select its own pods", s.Name)
				}
			}
		}
	}
	selects := func(what string, sel labels.Selector) {
		n := 0
		for _, s := range o.statefulSets {
			if sel.Matches(labels.Set(s.Spec.Template.Labels)) {
				n++
			}
		}
		if sel.Empty() || n != 1 {
			t.Errorf("%s selects the pods of %d StatefulSets, want 1", what, n)
		}
	}
	for _, svc := range o.services {
		selects("Service "+svc.Name, labels.SelectorFromSet(svc.Spec.Selector))
	}
	for _, pdb := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			t.Errorf("PodDisruptionBudget %s: %v", pdb.Name, err)
			continue
		}
		selects("PodDisruptionBudget "+pdb.Name, sel)
	}
	// A NetworkPolicy that selects no pod of the rendering (say, etcd's
	// left behind by an overlay that drops etcd) protects nothing.
	for _, np := range o.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Errorf("NetworkPolicy %s: %v", np.Name, err)
			continue
		}
		selects("NetworkPolicy "+np.Name, sel)
	}
}

// checkSiloNetworkPolicy: the silo pods' peer and gossip ports admit only
// silo pods (a request on the peer port skips the gateway's authentication
// and ACL), and every port a rule names is a declared container port.
func checkSiloNetworkPolicy(t *testing.T, o *objects) {
	t.Helper()
	silo := o.statefulSets["silo"]
	if silo == nil {
		t.Fatal("no StatefulSet silo")
	}
	podLabels := labels.Set(silo.Spec.Template.Labels)
	declared := map[string]bool{}
	for _, c := range silo.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			declared[p.Name] = true
		}
	}
	internal := map[string]bool{"peer": true, "gossip": true, "gossip-udp": true}
	covered := false
	for _, np := range o.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(podLabels) {
			continue
		}
		covered = true
		for _, rule := range np.Spec.Ingress {
			onlySilos := len(rule.From) > 0
			for _, from := range rule.From {
				fs, err := metav1.LabelSelectorAsSelector(from.PodSelector)
				if from.PodSelector == nil || err != nil || fs.Empty() || !fs.Matches(podLabels) || from.IPBlock != nil || from.NamespaceSelector != nil {
					onlySilos = false
				}
			}
			if len(rule.Ports) == 0 && !onlySilos {
				t.Errorf("NetworkPolicy %s: a rule admits every port from outside the silos", np.Name)
			}
			for _, p := range rule.Ports {
				if p.Port == nil || !declared[p.Port.String()] {
					t.Errorf("NetworkPolicy %s: port %v is not a named container port of the silo", np.Name, p.Port)
					continue
				}
				if internal[p.Port.String()] && !onlySilos {
					t.Errorf("NetworkPolicy %s: port %s is open beyond the silo pods", np.Name, p.Port.String())
				}
			}
		}
	}
	if !covered {
		t.Error("no NetworkPolicy selects the silo pods: their peer and gossip ports would be open to every pod")
	}
}

// checkServicePorts: each Service port targets a declared container port of
// the pods it selects, with the same protocol.
func checkServicePorts(t *testing.T, o *objects) {
	t.Helper()
	for _, svc := range o.services {
		for _, s := range o.statefulSets {
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)) {
				continue
			}
			for _, sp := range svc.Spec.Ports {
				proto := sp.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				target := sp.TargetPort
				if target.Type == intstr.Int && target.IntVal == 0 {
					target = intstr.FromInt32(sp.Port)
				}
				found := false
				for i := range s.Spec.Template.Spec.Containers {
					if _, ok := containerPort(&s.Spec.Template.Spec.Containers[i], target, proto); ok {
						found = true
					}
				}
				if !found {
					t.Errorf("Service %s port %s: target %s/%s is no containerPort of StatefulSet %s", svc.Name, sp.Name, target.String(), proto, s.Name)
				}
				if errs := validation.IsValidPortName(sp.Name); len(errs) > 0 {
					t.Errorf("Service %s port name %q: %v", svc.Name, sp.Name, errs)
				}
			}
		}
	}
}

// checkPod: security context, resources, volumes and images of every pod.
func checkPod(t *testing.T, s *appsv1.StatefulSet, o *objects, want variant) {
	t.Helper()
	pod := &s.Spec.Template.Spec
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("StatefulSet %s: the pod must run as a non-root numeric user", s.Name)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("StatefulSet %s: want seccompProfile RuntimeDefault", s.Name)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("StatefulSet %s: mounts a service account token it does not use", s.Name)
	}
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = false
		switch {
		case v.ConfigMap != nil:
			if _, ok := o.configMaps[v.ConfigMap.Name]; !ok && !slices.Contains(want.external, v.ConfigMap.Name) {
				t.Errorf("StatefulSet %s volume %s: no ConfigMap %s", s.Name, v.Name, v.ConfigMap.Name)
			}
		case v.Secret != nil:
			if _, ok := o.secrets[v.Secret.SecretName]; !ok && !slices.Contains(want.external, v.Secret.SecretName) {
				t.Errorf("StatefulSet %s volume %s: no Secret %s", s.Name, v.Name, v.Secret.SecretName)
			}
		}
	}
	for _, v := range s.Spec.VolumeClaimTemplates {
		volumes[v.Name] = false
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("container %s: no securityContext", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %s: root filesystem is writable", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s: privilege escalation allowed", c.Name)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("container %s: privileged", c.Name)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
			t.Errorf("container %s: capabilities must drop ALL and add none", c.Name)
		case sc.RunAsUser != nil && *sc.RunAsUser == 0:
			t.Errorf("container %s: runs as root", c.Name)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, okReq := c.Resources.Requests[r]
			lim, okLim := c.Resources.Limits[r]
			if !okReq || !okLim {
				t.Errorf("container %s: %s request and limit must both be set", c.Name, r)
			} else if req.Cmp(lim) > 0 {
				t.Errorf("container %s: %s request %s above limit %s", c.Name, r, req.String(), lim.String())
			}
		}
		for _, m := range c.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				t.Errorf("container %s mounts %s, which is no volume", c.Name, m.Name)
			}
			volumes[m.Name] = true
		}
		for _, p := range c.Ports {
			if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
				t.Errorf("container %s port name %q: %v", c.Name, p.Name, errs)
			}
		}
		if _, tag, ok := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":"); !ok || tag == "latest" {
			t.Errorf("container %s: image %q has no pinned tag", c.Name, c.Image)
		}
	}
	for v, used := range volumes {
		if !used {
			t.Errorf("StatefulSet %s: volume %s is mounted nowhere", s.Name, v)
		}
	}
}
