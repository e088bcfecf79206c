package main

// The Kubernetes manifests in docs/k8s, checked offline: every document is
// decoded strictly into its kind's Go type from k8s.io/api (the types the
// API server's own schema is generated from), so a misspelled or
// miscapitalised field, a duplicate key, a value of the wrong type or a
// malformed quantity is an error; then the invariants the API server
// would check and the ones a k3 cluster needs are checked by hand, and
// every k3 command line is parsed against the flags `k3 help CMD` lists.

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/k3go/k3/internal/app/cli"
)

// k8sDir is docs/k8s, from cmd/k3.
var k8sDir = filepath.Join("..", "..", "docs", "k8s")

// k8sKinds are the kinds the manifests may hold, each with its Go type. A
// kind missing here is an error: add its type rather than skip it.
var k8sKinds = map[string]func() metav1.Object{
	"v1 Service":          func() metav1.Object { return new(corev1.Service) },
	"v1 Secret":           func() metav1.Object { return new(corev1.Secret) },
	"apps/v1 StatefulSet": func() metav1.Object { return new(appsv1.StatefulSet) },
	"batch/v1 Job":        func() metav1.Object { return new(batchv1.Job) },
}

// k8sObject is one decoded document: where it is and what it holds.
type k8sObject struct {
	where string // file, document n, kind name
	obj   metav1.Object
}

// yamlSeparator is a line that starts a new YAML document.
var yamlSeparator = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

// decodeManifest decodes every document of a manifest file strictly.
func decodeManifest(file string, data []byte) ([]k8sObject, []error) {
	var objs []k8sObject
	var errs []error
	for i, doc := range yamlSeparator.Split(string(data), -1) {
		at := fmt.Sprintf("%s, document %d", file, i+1)
		j, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", at, err))
			continue
		}
		if s := string(bytes.TrimSpace(j)); s == "null" || s == "" {
			continue // only comments
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(j, &tm); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", at, err))
			continue
		}
		kind := tm.APIVersion + " " + tm.Kind
		newObj, ok := k8sKinds[kind]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %q: a kind this check does not know (add its Go type to k8sKinds)", at, kind))
			continue
		}
		obj := newObj()
		strict, err := kjson.UnmarshalStrict(j, obj)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", at, kind, err))
			continue
		}
		at = fmt.Sprintf("%s (%s %s)", at, tm.Kind, obj.GetName())
		for _, e := range strict {
			errs = append(errs, fmt.Errorf("%s: %w", at, e))
		}
		objs = append(objs, k8sObject{where: at, obj: obj})
	}
	return objs, errs
}

// readManifests reads and decodes every docs/k8s/*.yaml.
func readManifests(t *testing.T) (map[string][]k8sObject, []error) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests in %s (%v)", k8sDir, err)
	}
	files := make(map[string][]k8sObject)
	var errs []error
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		objs, e := decodeManifest(filepath.Base(p), b)
		files[filepath.Base(p)] = objs
		errs = append(errs, e...)
	}
	return files, errs
}

// checkManifests checks decoded objects: each on its own, and each file
// with a k3 cluster in it as a cluster. Secrets may come from any file.
func checkManifests(files map[string][]k8sObject) []error {
	secrets := make(map[string]*corev1.Secret)
	for _, objs := range files {
		for _, o := range objs {
			if s, ok := o.obj.(*corev1.Secret); ok {
				secrets[s.Name] = s
			}
		}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(files)) {
		objs := files[name]
		for _, o := range objs {
			errs = append(errs, checkObject(o, objs, secrets)...)
		}
		if hasCluster(objs) {
			errs = append(errs, checkCluster(name, objs)...)
		}
	}
	return errs
}

// podTemplate returns a workload's pod template and its selector, or nil.
func podTemplate(obj metav1.Object) (*corev1.PodTemplateSpec, *metav1.LabelSelector) {
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		return &o.Spec.Template, o.Spec.Selector
	case *batchv1.Job:
		return &o.Spec.Template, o.Spec.Selector
	}
	return nil, nil
}

// checkObject checks what the API server or the kubelet would refuse or
// get wrong, and what the strict decoding cannot see.
func checkObject(o k8sObject, file []k8sObject, secrets map[string]*corev1.Secret) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(o.where+": "+format, a...)) }
	for _, m := range validation.IsDNS1123Subdomain(o.obj.GetName()) {
		fail("name: %s", m)
	}
	switch v := o.obj.(type) {
	case *appsv1.StatefulSet:
		// Pod names are the set's name and an ordinal; they are host names.
		for _, m := range validation.IsDNS1123Label(v.Name + "-" + strconv.Itoa(1<<20)) {
			fail("name: %s", m)
		}
		if v.Spec.Selector == nil {
			fail("a StatefulSet needs spec.selector")
		}
	case *corev1.Service:
		if len(v.Spec.Selector) == 0 {
			fail("no selector")
		}
		// Each named target port is a port of a pod the Service selects.
		for _, p := range v.Spec.Ports {
			if p.TargetPort.Type != intstr.String {
				continue
			}
			found := false
			for _, w := range file {
				tpl, _ := podTemplate(w.obj)
				if tpl == nil || !labels.SelectorFromSet(v.Spec.Selector).Matches(labels.Set(tpl.Labels)) {
					continue
				}
				for _, c := range tpl.Spec.Containers {
					found = found || containerPort(&c, p.TargetPort) > 0
				}
			}
			if !found {
				fail("port %q: no pod it selects has a port named %q", p.Name, p.TargetPort.StrVal)
			}
		}
	}
	tpl, sel := podTemplate(o.obj)
	if tpl == nil {
		return errs
	}
	if sel != nil {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			fail("selector: %v", err)
		} else if !s.Matches(labels.Set(tpl.Labels)) {
			fail("selector %v does not match the pod template's labels %v", s, tpl.Labels)
		}
	}
	return append(errs, checkPod(o.where, &tpl.Spec, secrets)...)
}

// envRef is a $(VAR) reference, which the kubelet expands in command and
// args from the container's environment, and leaves as it is when VAR is
// not defined.
var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkPod checks a pod template's volumes, ports, probes, resources and
// the k3 command lines in it.
func checkPod(where string, spec *corev1.PodSpec, secrets map[string]*corev1.Secret) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(where+": "+format, a...)) }
	volumes := make(map[string]*corev1.Volume)
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if volumes[v.Name] != nil {
			fail("volume %q defined twice", v.Name)
		}
		volumes[v.Name] = v
		if s := v.Secret; s != nil {
			sec := secrets[s.SecretName]
			if sec == nil {
				fail("volume %q: no Secret %q in docs/k8s", v.Name, s.SecretName)
				continue
			}
			for _, it := range s.Items {
				if !secretHas(sec, it.Key) {
					fail("volume %q: Secret %q has no key %q", v.Name, s.SecretName, it.Key)
				}
			}
		}
	}
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for i := range all {
		c := &all[i]
		cfail := func(format string, a ...any) { fail("container %q: "+format, append([]any{c.Name}, a...)...) }
		for _, m := range validation.IsDNS1123Label(c.Name) {
			cfail("name: %s", m)
		}
		for _, vm := range c.VolumeMounts {
			if volumes[vm.Name] == nil {
				cfail("mounts volume %q, which the pod does not define", vm.Name)
			}
		}
		for _, p := range c.Ports {
			if p.Name != "" {
				for _, m := range validation.IsValidPortName(p.Name) {
					cfail("port %q: %s", p.Name, m)
				}
			}
		}
		for what, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
			if p == nil {
				continue
			}
			var port intstr.IntOrString
			switch {
			case p.HTTPGet != nil:
				port = p.HTTPGet.Port
			case p.TCPSocket != nil:
				port = p.TCPSocket.Port
			case p.Exec != nil:
				continue
			default:
				cfail("%s probe has no handler", what)
				continue
			}
			if port.Type == intstr.String && containerPort(c, port) == 0 {
				cfail("%s probe: no container port named %q", what, port.StrVal)
			}
		}
		for name, req := range c.Resources.Requests {
			if lim, ok := c.Resources.Limits[name]; ok && req.Cmp(lim) > 0 {
				cfail("requests %s %s above its limit %s", name, req.String(), lim.String())
			}
		}
		env := make(map[string]bool)
		for _, e := range c.Env {
			if env[e.Name] {
				cfail("environment variable %s defined twice", e.Name)
			}
			env[e.Name] = true
		}
		for _, a := range append(slices.Clone(c.Command), c.Args...) {
			for _, m := range envRef.FindAllStringSubmatch(a, -1) {
				if !env[m[1]] {
					cfail("%q refers to $(%s), which the container's env does not define (the kubelet would pass it as it is)", a, m[1])
				}
			}
		}
		if isK3(c) {
			errs = append(errs, checkK3Container(where, c, volumes, secrets)...)
		}
	}
	return errs
}

// secretHas reports whether s has key in data or stringData.
func secretHas(s *corev1.Secret, key string) bool {
	_, d := s.Data[key]
	_, sd := s.StringData[key]
	return d || sd
}

// containerPort returns the container's port that p names (by name or
// number), 0 if it has none.
func containerPort(c *corev1.Container, p intstr.IntOrString) int {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return int(cp.ContainerPort)
		}
	}
	return 0
}

// isK3 reports whether a container runs the k3 command.
func isK3(c *corev1.Container) bool { return len(c.Command) > 0 && c.Command[0] == "k3" }

// k3Line is a k3 command line from a manifest: the subcommand and its
// flags, parsed.
type k3Line struct {
	sub   string
	flags map[string]string
}

// k3CommandLine returns a k3 container's subcommand and arguments, with
// $(VAR) expanded from the container's env; fields gives the values of
// the downward API's fields (fieldPath to value).
func k3CommandLine(c *corev1.Container, fields map[string]string) (string, []string) {
	words := append(slices.Clone(c.Command[1:]), c.Args...)
	if len(words) == 0 {
		return "", nil
	}
	env := make(map[string]string)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			if v, ok := fields[e.ValueFrom.FieldRef.FieldPath]; ok {
				env[e.Name] = v
			}
		}
	}
	for i, w := range words {
		words[i] = envRef.ReplaceAllStringFunc(w, func(ref string) string {
			if v, ok := env[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref
		})
	}
	return words[0], words[1:]
}

// k3Flags caches each subcommand's flags as `k3 help CMD` lists them: the
// name and whether it is a boolean.
var k3Flags = map[string]map[string]bool{}

// flagLine is a flag in the flag package's usage listing: "  -name" and,
// unless it is a boolean, the kind of value it takes.
var flagLine = regexp.MustCompile(`^  -([a-z0-9][a-z0-9-]*)(?: (\S+))?$`)

// parseK3 parses a k3 command line against the flags its subcommand
// defines, as `k3 help` lists them.
func parseK3(sub string, args []string) (k3Line, error) {
	known, ok := k3Flags[sub]
	if !ok {
		var out, errb bytes.Buffer
		if code := run([]string{sub, "--help"}, strings.NewReader(""), &out, &errb); code != cli.ExitOK {
			return k3Line{}, fmt.Errorf("k3 help %s: exit %d: %s", sub, code, errb.String())
		}
		known = make(map[string]bool)
		for _, l := range strings.Split(out.String(), "\n") { // the usage is on stdout
			if m := flagLine.FindStringSubmatch(l); m != nil {
				known[m[1]] = m[2] == ""
			}
		}
		if len(known) == 0 {
			return k3Line{}, fmt.Errorf("k3 help %s lists no flags", sub)
		}
		k3Flags[sub] = known
	}
	fs := flag.NewFlagSet(sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for name, isBool := range known {
		if isBool {
			fs.Bool(name, false, "")
		} else {
			fs.String(name, "", "")
		}
	}
	if err := fs.Parse(args); err != nil {
		return k3Line{}, fmt.Errorf("k3 %s %q: %w (k3 help %s lists the flags)", sub, args, err, sub)
	}
	if fs.NArg() > 0 {
		return k3Line{}, fmt.Errorf("k3 %s %q: unexpected argument %q", sub, args, fs.Arg(0))
	}
	l := k3Line{sub: sub, flags: make(map[string]string)}
	fs.Visit(func(f *flag.Flag) { l.flags[f.Name] = f.Value.String() })
	return l, nil
}

// k3FileFlags are the flags that name a file the pod must mount.
var k3FileFlags = []string{"cluster-key-file", "cluster-cert", "cluster-cert-key", "cluster-ca"}

// checkK3Container parses a k3 container's command line and checks its
// values: sizes, numbers, addresses, and that the files it names are in
// the volumes the container mounts.
func checkK3Container(where string, c *corev1.Container, volumes map[string]*corev1.Volume, secrets map[string]*corev1.Secret) []error {
	var errs []error
	fail := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: container %q: %s", where, c.Name, fmt.Sprintf(format, a...)))
	}
	// The downward API's values, as the first pod would see them.
	fields := map[string]string{
		"metadata.labels['" + appsv1.PodIndexLabel + "']":                      "1",
		"metadata.annotations['" + batchv1.JobCompletionIndexAnnotation + "']": "0",
	}
	sub, args := k3CommandLine(c, fields)
	l, err := parseK3(sub, args)
	if err != nil {
		fail("%v", err)
		return errs
	}
	for name, v := range l.flags {
		var err error
		switch name {
		case "budget":
			_, err = (&cli.BudgetFlags{Budget: v}).Bytes()
		case "rank", "ranks", "sessions", "threads", "queue", "max-batch", "concurrency":
			_, err = strconv.Atoi(v)
		case "peer-timeout", "peer-load-timeout", "shutdown-timeout", "request-timeout", "body-timeout", "progress-every":
			_, err = time.ParseDuration(v)
		case "listen", "addr":
			_, err = hostPort(v)
		case "peers":
			for _, p := range strings.Split(v, ",") {
				if _, e := hostPort(p); e != nil {
					err = errors.Join(err, e)
				}
			}
		case "prefix-cache-disk", "prefix-cache-ram", "max-body", "probe-size":
			_, err = cli.ParseSize(v)
		}
		if err != nil {
			fail("--%s=%s: %v", name, v, err)
		}
	}
	if m, ok := l.flags["model"]; ok && mountOf(c, m) == nil {
		fail("--model=%s is not in a volume the container mounts", m)
	}
	for _, name := range k3FileFlags {
		path, ok := l.flags[name]
		if !ok {
			continue
		}
		vm := mountOf(c, path)
		if vm == nil {
			fail("--%s=%s is not in a volume the container mounts", name, path)
			continue
		}
		v := volumes[vm.Name]
		if v == nil || v.Secret == nil {
			continue
		}
		key := strings.TrimPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/")
		for _, it := range v.Secret.Items {
			if it.Path == key {
				key = it.Key
			}
		}
		if s := secrets[v.Secret.SecretName]; s != nil && !secretHas(s, key) {
			fail("--%s=%s: Secret %q has no key %q", name, path, v.Secret.SecretName, key)
		}
	}
	return errs
}

// hostPort splits HOST:PORT and returns the port.
func hostPort(s string) (int, error) {
	_, p, err := net.SplitHostPort(s)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q: bad port %q", s, p)
	}
	return n, nil
}

// mountOf returns the container's volume mount that holds path.
func mountOf(c *corev1.Container, path string) *corev1.VolumeMount {
	for i, vm := range c.VolumeMounts {
		mp := strings.TrimSuffix(vm.MountPath, "/")
		if path == mp || strings.HasPrefix(path, mp+"/") {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// k3Container returns a pod template's container running k3 sub.
func k3Container(spec *corev1.PodSpec, sub string) *corev1.Container {
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if s, _ := k3CommandLine(c, nil); isK3(c) && s == sub {
			return c
		}
	}
	return nil
}

// hasCluster reports whether objs hold a StatefulSet running k3 worker.
func hasCluster(objs []k8sObject) bool {
	for _, o := range objs {
		if s, ok := o.obj.(*appsv1.StatefulSet); ok && k3Container(&s.Spec.Template.Spec, "worker") != nil {
			return true
		}
	}
	return false
}

// checkCluster checks what a k3 cluster needs of its objects: one rank 0
// (a StatefulSet of one running k3 serve --peers) and one StatefulSet of
// workers whose ordinal is their rank; rank 0's peers are exactly the
// workers' stable names on the headless Service, in rank order, on the
// port they listen on; every rank has the same image, checkpoint, key and
// TLS; one rank per node; RAM for the budget; and Services and probes on
// the right ports.
func checkCluster(file string, objs []k8sObject) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(file+": "+format, a...)) }
	var rank0, workers *appsv1.StatefulSet
	var headless, api []*corev1.Service
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *appsv1.StatefulSet:
			switch {
			case k3Container(&v.Spec.Template.Spec, "worker") != nil:
				if workers != nil {
					fail("two StatefulSets of workers, %s and %s", workers.Name, v.Name)
				}
				workers = v
			case k3Container(&v.Spec.Template.Spec, "serve") != nil:
				if rank0 != nil {
					fail("two StatefulSets run k3 serve, %s and %s", rank0.Name, v.Name)
				}
				rank0 = v
			}
		case *corev1.Service:
			if v.Spec.ClusterIP == corev1.ClusterIPNone {
				headless = append(headless, v)
			} else {
				api = append(api, v)
			}
		}
	}
	if rank0 == nil || workers == nil || len(headless) != 1 || len(api) != 1 {
		fail("want a StatefulSet running k3 serve, one running k3 worker, a headless Service and an API Service")
		return errs
	}
	hs := headless[0]
	c0 := k3Container(&rank0.Spec.Template.Spec, "serve")
	cw := k3Container(&workers.Spec.Template.Spec, "worker")
	l0 := lineOf(c0, nil)
	if l0.flags == nil {
		fail("rank 0's k3 serve does not parse (see the other errors)")
		return errs
	}

	if rank0.Spec.Replicas == nil || *rank0.Spec.Replicas != 1 {
		fail("%s: replicas must be 1: a cluster has one rank 0", rank0.Name)
	}
	if workers.Spec.Ordinals == nil || workers.Spec.Ordinals.Start != 1 {
		fail("%s: spec.ordinals.start must be 1, so that a worker's ordinal is its rank", workers.Name)
	}
	if workers.Spec.Replicas == nil || *workers.Spec.Replicas < 1 {
		fail("%s: needs replicas >= 1", workers.Name)
		return errs
	}
	n := int(*workers.Spec.Replicas) + 1
	for _, s := range []*appsv1.StatefulSet{rank0, workers} {
		if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
			fail("%s: podManagementPolicy must be Parallel: ranks start, load and restart independently", s.Name)
		}
		if s.Spec.ServiceName != hs.Name {
			fail("%s: serviceName %q, want the headless Service %q (the peers' names are pod.%s)", s.Name, s.Spec.ServiceName, hs.Name, hs.Name)
		}
	}
	if !labels.SelectorFromSet(hs.Spec.Selector).Matches(labels.Set(workers.Spec.Template.Labels)) {
		fail("headless Service %s does not select the workers", hs.Name)
	}
	if !hs.Spec.PublishNotReadyAddresses {
		fail("headless Service %s: publishNotReadyAddresses must be true, so that rank 0 reaches a worker as soon as it listens", hs.Name)
	}

	// Every worker: its rank, the cluster's size, its port.
	var listen int
	for r := 1; r < n; r++ {
		l := lineOf(cw, map[string]string{"metadata.labels['" + appsv1.PodIndexLabel + "']": strconv.Itoa(r)})
		if l.flags == nil {
			fail("%s-%d: k3 worker does not parse", workers.Name, r)
			return errs
		}
		if l.flags["rank"] != strconv.Itoa(r) || l.flags["ranks"] != strconv.Itoa(n) {
			fail("%s-%d runs --rank=%s --ranks=%s; with %d replicas it is rank %d of %d", workers.Name, r, l.flags["rank"], l.flags["ranks"], n-1, r, n)
		}
		p, err := hostPort(l.flags["listen"])
		if err != nil {
			fail("%s-%d: --listen: %v", workers.Name, r, err)
			return errs
		}
		listen = p
	}
	if cp := cw.ReadinessProbe; cp == nil || cp.TCPSocket == nil || containerPort(cw, cp.TCPSocket.Port) != listen {
		fail("%s: the readiness probe must be a TCP probe on the --listen port %d", workers.Name, listen)
	}
	for _, p := range hs.Spec.Ports {
		if tp := p.TargetPort; (tp.Type == intstr.String && containerPort(cw, tp) != listen) || (tp.Type == intstr.Int && int(tp.IntVal) != listen) {
			fail("headless Service %s: port %q targets %s, not the workers' --listen port %d", hs.Name, p.Name, tp.String(), listen)
		}
	}

	// Rank 0's peers: the workers' stable names, rank 1 first.
	var want []string
	for r := 1; r < n; r++ {
		want = append(want, fmt.Sprintf("%s-%d.%s:%d", workers.Name, r, hs.Name, listen))
	}
	if got := strings.Split(l0.flags["peers"], ","); !slices.Equal(got, want) {
		fail("rank 0's --peers are %q; with %d workers listening on %d, want %q", got, n-1, listen, want)
	}
	// Init containers that wait for the peers wait for the same ones.
	for _, ic := range rank0.Spec.Template.Spec.InitContainers {
		for _, e := range ic.Env {
			if e.Name == "K3_PEERS" && e.Value != strings.Join(want, ",") {
				fail("init container %q waits for %q, not rank 0's peers %q", ic.Name, e.Value, strings.Join(want, ","))
			}
		}
	}

	// The API: rank 0 only, on its --addr port, ready on /health.
	addr, err := hostPort(l0.flags["addr"])
	if err != nil {
		fail("rank 0's --addr: %v", err)
	} else if h, _, _ := net.SplitHostPort(l0.flags["addr"]); h == "127.0.0.1" || h == "localhost" {
		fail("rank 0's --addr %s is unreachable from other pods", l0.flags["addr"])
	}
	sel := labels.SelectorFromSet(api[0].Spec.Selector)
	if !sel.Matches(labels.Set(rank0.Spec.Template.Labels)) || sel.Matches(labels.Set(workers.Spec.Template.Labels)) {
		fail("Service %s must select rank 0 and no worker", api[0].Name)
	}
	for _, p := range api[0].Spec.Ports {
		if containerPort(c0, p.TargetPort) != addr {
			fail("Service %s: port %q targets %s, not rank 0's --addr port %d", api[0].Name, p.Name, p.TargetPort.String(), addr)
		}
	}
	if p := c0.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || containerPort(c0, p.HTTPGet.Port) != addr {
		fail("rank 0's readiness probe must be GET /health on port %d (503 until every rank is connected)", addr)
	}
	if p := c0.LivenessProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path == "/health" {
		fail("rank 0's liveness probe is /health, which is 503 while a worker is missing: it would restart rank 0 for nothing")
	}
	shutdown := 30 * time.Second
	if s, ok := l0.flags["shutdown-timeout"]; ok {
		shutdown, _ = time.ParseDuration(s)
	}
	if g := rank0.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= shutdown {
		fail("rank 0's terminationGracePeriodSeconds must exceed --shutdown-timeout (%v)", shutdown)
	}

	// The same bits on every rank: image, checkpoint, key, TLS, kernels.
	lw := lineOf(cw, map[string]string{"metadata.labels['" + appsv1.PodIndexLabel + "']": "1"})
	if c0.Image != cw.Image {
		fail("rank 0 runs %s and the workers %s: ranks of other k3 versions refuse each other", c0.Image, cw.Image)
	}
	for _, f := range append([]string{"model"}, k3FileFlags...) {
		if l0.flags[f] != lw.flags[f] {
			fail("--%s is %q on rank 0 and %q on the workers", f, l0.flags[f], lw.flags[f])
		}
	}
	if l0.flags["cluster-key-file"] == "" {
		fail("the ranks need --cluster-key-file (a Secret mounted as a file)")
	}
	if hostPathOf(&rank0.Spec.Template.Spec, c0, l0.flags["model"]) != hostPathOf(&workers.Spec.Template.Spec, cw, lw.flags["model"]) {
		fail("rank 0 and the workers read their checkpoint from different volumes")
	}
	if env(c0, "K3_KERNELS") != env(cw, "K3_KERNELS") {
		fail("K3_KERNELS is %q on rank 0 and %q on the workers: other kernels refuse each other", env(c0, "K3_KERNELS"), env(cw, "K3_KERNELS"))
	}

	// One rank per node, of either set.
	for _, s := range []*appsv1.StatefulSet{rank0, workers} {
		if !spreadsAll(&s.Spec.Template.Spec, rank0.Spec.Template.Labels, workers.Spec.Template.Labels) {
			fail("%s: needs a required pod anti-affinity on kubernetes.io/hostname that matches every rank's labels: one rank per node", s.Name)
		}
	}

	// RAM: the limit above the budget; rank 0 at least a worker's budget.
	var budgets [2]int64
	for i, x := range []struct {
		set string
		c   *corev1.Container
		l   k3Line
	}{{rank0.Name, c0, l0}, {workers.Name, cw, lw}} {
		b, err := (&cli.BudgetFlags{Budget: x.l.flags["budget"]}).Bytes()
		if err != nil || b <= 0 {
			fail("%s: a rank needs a --budget (%v)", x.set, err)
			continue
		}
		budgets[i] = b
		lim, ok := x.c.Resources.Limits[corev1.ResourceMemory]
		if headroom := int64(2 << 30); !ok || lim.Value() < b+headroom {
			fail("%s: memory limit %s; --budget=%s needs at least %.1f GiB (the budget plus 2 GiB)", x.set, lim.String(),
				x.l.flags["budget"], float64(b+headroom)/(1<<30))
		}
	}
	if budgets[0] < budgets[1] {
		fail("rank 0's budget is below a worker's: rank 0 also holds every session's state")
	}
	return errs
}

// lineOf parses a k3 container's command line (flags nil if it does not
// parse: checkK3Container reports why).
func lineOf(c *corev1.Container, fields map[string]string) k3Line {
	sub, args := k3CommandLine(c, fields)
	l, err := parseK3(sub, args)
	if err != nil {
		return k3Line{}
	}
	return l
}

// env returns a container's literal environment value.
func env(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// hostPathOf returns the host path of the volume that holds path.
func hostPathOf(spec *corev1.PodSpec, c *corev1.Container, path string) string {
	vm := mountOf(c, path)
	if vm == nil {
		return ""
	}
	for _, v := range spec.Volumes {
		if v.Name == vm.Name && v.HostPath != nil {
			return v.HostPath.Path
		}
	}
	return ""
}

// spreadsAll reports whether spec has a required pod anti-affinity per
// host whose selector matches every one of sets.
func spreadsAll(spec *corev1.PodSpec, sets ...map[string]string) bool {
	if spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil {
		return false
	}
	for _, term := range spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err != nil || term.TopologyKey != corev1.LabelHostname {
			continue
		}
		all := true
		for _, s := range sets {
			all = all && sel.Matches(labels.Set(s))
		}
		if all {
			return true
		}
	}
	return false
}

// TestK8sManifests: every manifest in docs/k8s decodes strictly into its
// Kubernetes types and passes the checks above, the cluster's included.
func TestK8sManifests(t *testing.T) {
	files, errs := readManifests(t)
	for _, want := range []string{"k3-batch-job.yaml", "k3-cluster.yaml", "k3-cluster-secrets.yaml", "k3-checkpoint-copy.yaml"} {
		if len(files[want]) == 0 {
			t.Errorf("docs/k8s/%s: missing or empty", want)
		}
	}
	if !hasCluster(files["k3-cluster.yaml"]) {
		t.Errorf("docs/k8s/k3-cluster.yaml has no StatefulSet running k3 worker")
	}
	errs = append(errs, checkManifests(files)...)
	for _, err := range errs {
		t.Error(err)
	}
}

// TestK8sManifestMistakes: the checks catch the mistakes they are for.
// Each case changes docs/k8s/k3-cluster.yaml (or the secrets beside it)
// and expects an error naming the problem.
func TestK8sManifestMistakes(t *testing.T) {
	cluster, err := os.ReadFile(filepath.Join(k8sDir, "k3-cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := os.ReadFile(filepath.Join(k8sDir, "k3-cluster-secrets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, old, new string
		n              int    // how many times old occurs
		secrets        bool   // change the secrets' file instead
		want           string // in one of the errors
	}{
		{"misspelled field", "ordinals:\n    start: 1", "ordinal:\n    start: 1", 1, false, `unknown field "spec.ordinal"`},
		{"miscapitalised field", "containerPort: 7070", "containerport: 7070", 1, false, `unknown field "spec.template.spec.containers[0].ports[0].containerport"`},
		{"duplicate key", "  clusterIP: None\n", "  clusterIP: None\n  clusterIP: None\n", 1, false, `already set in map`},
		{"wrong type", "replicas: 1 #", "replicas: one #", 1, false, "cannot unmarshal"},
		{"bad quantity", "memory: 124Gi", "memory: 124GB", 2, false, "quantities must match"},
		{"misspelled k3 flag", "- --ranks=4", "- --rank-count=4", 1, false, "flag provided but not defined: -rank-count"},
		{"bad budget", "--budget=120GB", "--budget=120 gigs", 1, false, "--budget=120 gigs"},
		{"undefined variable", "--rank=$(K3_RANK)", "--rank=$(K3_RNAK)", 1, false, "$(K3_RNAK)"},
		{"workers added, peers not", "replicas: 3 # RANKS", "replicas: 4 # RANKS", 1, false, "rank 0's --peers"},
		{"ranks not changed", "--ranks=4 # RANKS", "--ranks=5 # RANKS", 1, false, "with 3 replicas it is rank 1 of 4"},
		{"peers out of order", "k3-worker-1.k3-cluster:7070,k3-worker-2.k3-cluster:7070", "k3-worker-2.k3-cluster:7070,k3-worker-1.k3-cluster:7070", 1, false, "rank 0's --peers"},
		{"another port", "--listen=0.0.0.0:7070", "--listen=0.0.0.0:7071", 1, false, "not the workers' --listen port 7071"},
		{"ordinals from 0", "ordinals:\n    start: 1", "ordinals:\n    start: 0", 1, false, "spec.ordinals.start must be 1"},
		{"no headless Service", "clusterIP: None", "clusterIP: \"\"", 1, false, "a headless Service"},
		{"secret missing", "secretName: k3-cluster-tls", "secretName: k3-cluster-tsl", 2, false, `no Secret "k3-cluster-tsl"`},
		{"secret key missing", "  key: replace me", "  kee: replace me", 1, true, `Secret "k3-cluster-key" has no key "key"`},
		{"file outside the mounts", "--cluster-ca=/etc/k3/tls/ca.crt", "--cluster-ca=/etc/k3/ca.crt", 2, false, "--cluster-ca=/etc/k3/ca.crt is not in a volume"},
		{"another image", "image: registry.example.com/k3:0.1.0 # the same", "image: registry.example.com/k3:0.2.0 # the same", 1, false, "ranks of other k3 versions"},
		{"RAM below the budget", "memory: 232Gi", "memory: 200Gi", 2, false, "memory limit 200Gi"},
		{"one per node lost", "topologyKey: kubernetes.io/hostname", "topologyKey: topology.kubernetes.io/zone", 2, false, "one rank per node"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := &cluster
			if c.secrets {
				src = &secrets
			}
			if got := strings.Count(string(*src), c.old); got != c.n {
				t.Fatalf("%q occurs %d times in the manifest, want %d: update this case", c.old, got, c.n)
			}
			changed := strings.ReplaceAll(string(*src), c.old, c.new)
			files := map[string][]k8sObject{}
			var errs []error
			for name, b := range map[string][]byte{"k3-cluster.yaml": cluster, "k3-cluster-secrets.yaml": secrets} {
				if (name == "k3-cluster.yaml") != c.secrets {
					b = []byte(changed)
				}
				objs, e := decodeManifest(name, b)
				files[name] = objs
				errs = append(errs, e...)
			}
			errs = append(errs, checkManifests(files)...)
			var msgs []string
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			if !strings.Contains(strings.Join(msgs, "\n"), c.want) {
				t.Errorf("no error says %q; the errors:\n%s", c.want, strings.Join(msgs, "\n"))
			}
		})
	}
}
