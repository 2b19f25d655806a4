package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const goodToken = "good-token"

// fakeReviewer answers TokenReviews from a table and counts them.
type fakeReviewer struct {
	mu      sync.Mutex
	reviews map[string]Review
	err     error
	calls   int
}

func (f *fakeReviewer) Review(_ context.Context, token string, audiences []string) (Review, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return Review{}, f.err
	}
	if !slices.Equal(audiences, []string{defaultAudience}) {
		return Review{}, fmt.Errorf("reviewed for %v", audiences)
	}
	return f.reviews[token], nil
}

func newFakeReviewer() *fakeReviewer {
	return &fakeReviewer{reviews: map[string]Review{
		goodToken: {Authenticated: true, Audiences: []string{defaultAudience}, Username: defaultAllowedUser},
		"other-user": {Authenticated: true, Audiences: []string{defaultAudience},
			Username: "system:serviceaccount:default:someone"},
		"other-audience": {Authenticated: true, Audiences: []string{"https://kubernetes.default.svc"},
			Username: defaultAllowedUser},
	}}
}

func newTestServer(t *testing.T, reviewer TokenReviewer, maxRequestBytes int64) (*httptest.Server, *server) {
	t.Helper()
	s := newServer(reviewer, defaultAudience, defaultAllowedUser, maxRequestBytes)
	ts := httptest.NewTLSServer(s)
	t.Cleanup(ts.Close)
	return ts, s
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func call(t *testing.T, ts *httptest.Server, method, path, token string, body []byte) answer {
	t.Helper()
	request, err := http.NewRequest(method, ts.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		request.Header.Set("Authorization", "Bearer "+token)
	}
	request.Header.Set("Content-Type", "application/json")
	response, err := ts.Client().Do(request)
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	data, err := io.ReadAll(response.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := response.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, path, got)
	}
	return answer{status: response.StatusCode, header: response.Header, body: data}
}

// theError reads an error answer, checking its status and shape.
func theError(t *testing.T, a answer, status int) pluginError {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	var e struct {
		Error *pluginError `json:"error"`
	}
	decoder := json.NewDecoder(bytes.NewReader(a.body))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&e); err != nil || e.Error == nil || e.Error.Message == "" {
		t.Fatalf("not an error document (%v): %s", err, a.body)
	}
	if !strings.Contains(string(a.body), `"retryable":`) {
		t.Errorf("retryable is missing: %s", a.body)
	}
	return *e.Error
}

// chartArchiveOf packs files (paths inside the chart) as `helm package` would: a gzipped tar
// with everything under the chart's name.
func chartArchiveOf(t *testing.T, name string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, file := range slices.Sorted(maps.Keys(files)) {
		data := files[file]
		header := &tar.Header{Name: name + "/" + file, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(header); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// appYAML starts with a comment-only document; the Deployment starts on line 3 and the
// ConfigMap on line 11.
const appYAML = `# only a comment: an empty document
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "mychart.fullname" . }}
spec:
  replicas: {{ .Values.replicaCount }}
  progressDeadlineSeconds: 600
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "mychart.fullname" . }}-config
data:
  greeting: {{ .Values.greeting | quote }}
  kubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}
  monitoring: {{ .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" | quote }}
  lookup: {{ lookup "v1" "Secret" "default" "x" | len | quote }}
  namespace: {{ .Release.Namespace }}
  install: {{ .Release.IsInstall | quote }}
  revision: {{ .Release.Revision | quote }}
`

const hooksYAML = `apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  annotations:
    "helm.sh/hook": pre-install,pre-upgrade
    "helm.sh/hook-weight": "5"
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: migrate
          image: example.com/migrate:1
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: early
  annotations:
    "helm.sh/hook": pre-install
    "helm.sh/hook-weight": "-1"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: after
  annotations:
    "helm.sh/hook": post-install
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: upgrade-only
  annotations:
    "helm.sh/hook": pre-upgrade
`

// testChart is a tiny chart with a bit of everything the plugin handles.
func testChart() map[string]string {
	return map[string]string{
		"Chart.yaml": `apiVersion: v2
name: mychart
version: 1.2.3
deprecated: true
dependencies:
  - name: sub
    version: 0.1.0
`,
		"values.yaml": `replicaCount: 1
greeting: hello
sub:
  color: blue
`,
		"values.schema.json": `{"type": "object", "properties": {"replicaCount": {"type": "integer"}}}`,
		"templates/_helpers.tpl": `{{- define "mychart.fullname" -}}
{{ .Release.Name }}-mychart
{{- end -}}
`,
		"templates/app.yaml": appYAML,
		"templates/serviceaccount.yaml": `apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .Release.Name }}
`,
		"templates/hooks.yaml": hooksYAML,
		"templates/tests/test-connection.yaml": `apiVersion: v1
kind: Pod
metadata:
  name: {{ .Release.Name }}-test
  annotations:
    "helm.sh/hook": test
spec:
  containers:
    - name: wget
      image: busybox
`,
		"templates/empty.yaml": "{{- if false }}\nkind: Nothing\n{{- end }}\n",
		"templates/NOTES.txt":  "{{ .Release.Name }} is installed in {{ .Release.Namespace }}.\n",
		"crds/widgets.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object}}
`,
		"charts/sub/Chart.yaml":          "apiVersion: v2\nname: sub\nversion: 0.1.0\n",
		"charts/sub/values.yaml":         "color: red\n",
		"charts/sub/templates/NOTES.txt": "the sub-chart's notes are not shown\n",
		"charts/sub/templates/cm.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-sub
data:
  color: {{ .Values.color }}
`,
	}
}

func renderRequestFor(t *testing.T, archive []byte, config map[string]any) []byte {
	t.Helper()
	request := map[string]any{
		"contract": "v1",
		"content": map[string]any{
			"mediaType": helmConfigType,
			"digest":    "sha256:" + strings.Repeat("5b", 32),
			"layers": []any{map[string]any{
				"mediaType": helmChartLayer,
				"digest":    "sha256:" + strings.Repeat("e3", 32),
				"data":      base64.StdEncoding.EncodeToString(archive),
			}},
			"config": base64.StdEncoding.EncodeToString([]byte(`{}`)),
		},
		"config":  config,
		"release": map[string]any{"name": "metrics", "namespace": "monitoring"},
		"cluster": map[string]any{
			"version":     "v1.34.1",
			"apiVersions": []string{"v1", "apps/v1", "apps/v1/Deployment", "monitoring.coreos.com/v1"},
		},
	}
	data, err := json.Marshal(request)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestIdentityAndProbe(t *testing.T) {
	ts, _ := newTestServer(t, newFakeReviewer(), 1<<20)
	for path, want := range map[string]string{
		"/gantry.dev/v1/identity": `{"contract":"v1","id":"gantry.dev/helm","version":"0.1.0","mediaTypes":["application/vnd.cncf.helm.config.v1+json"],"capabilities":["waves","notes"]}` + "\n",
		"/gantry.dev/v1/probe":    `{"ready":true}` + "\n",
	} {
		a := call(t, ts, http.MethodGet, path, goodToken, nil)
		if a.status != http.StatusOK || string(a.body) != want {
			t.Errorf("%s: %d %s, want %s", path, a.status, a.body, want)
		}
	}
}

func TestRoutes(t *testing.T) {
	ts, _ := newTestServer(t, newFakeReviewer(), 1<<20)
	theError(t, call(t, ts, http.MethodGet, "/gantry.dev/v1/nothing", goodToken, nil), http.StatusNotFound)
	theError(t, call(t, ts, http.MethodGet, "/", goodToken, nil), http.StatusNotFound)
	a := call(t, ts, http.MethodPost, "/gantry.dev/v1/identity", goodToken, nil)
	theError(t, a, http.StatusMethodNotAllowed)
	if a.header.Get("Allow") != http.MethodGet {
		t.Errorf("Allow: %q", a.header.Get("Allow"))
	}
	theError(t, call(t, ts, http.MethodGet, "/gantry.dev/v1/render", goodToken, nil), http.StatusMethodNotAllowed)
}

type gotObject struct {
	kind, name, file string
	line, wave       int
}

func TestRender(t *testing.T) {
	ts, _ := newTestServer(t, newFakeReviewer(), 8<<20)
	archive := chartArchiveOf(t, "mychart", testChart())
	a := call(t, ts, http.MethodPost, "/gantry.dev/v1/render", goodToken,
		renderRequestFor(t, archive, map[string]any{"replicaCount": 3, "sub": map[string]any{"color": "green"}}))
	if a.status != http.StatusOK {
		t.Fatalf("%d: %s", a.status, a.body)
	}
	var response struct {
		Objects []struct {
			Object map[string]any `json:"object"`
			Source struct {
				File string `json:"file"`
				Line int    `json:"line"`
			} `json:"source"`
			Wave int `json:"wave"`
		} `json:"objects"`
		Warnings []string `json:"warnings"`
		Notes    string   `json:"notes"`
	}
	decoder := json.NewDecoder(bytes.NewReader(a.body))
	decoder.DisallowUnknownFields()
	decoder.UseNumber()
	if err := decoder.Decode(&response); err != nil {
		t.Fatal(err)
	}
	var got []gotObject
	for _, o := range response.Objects {
		metadata := o.Object["metadata"].(map[string]any)
		got = append(got, gotObject{o.Object["kind"].(string), metadata["name"].(string), o.Source.File, o.Source.Line, o.Wave})
	}
	want := []gotObject{
		{"CustomResourceDefinition", "widgets.example.com", "crds/widgets.yaml", 1, 0},
		{"ConfigMap", "early", "templates/hooks.yaml", 16, 1},
		{"Job", "migrate", "templates/hooks.yaml", 1, 2},
		{"ServiceAccount", "metrics", "templates/serviceaccount.yaml", 1, 3},
		{"ConfigMap", "metrics-sub", "charts/sub/templates/cm.yaml", 1, 3},
		{"ConfigMap", "metrics-mychart-config", "templates/app.yaml", 11, 3},
		{"Deployment", "metrics-mychart", "templates/app.yaml", 3, 3},
		{"ConfigMap", "after", "templates/hooks.yaml", 24, 4},
	}
	if !slices.Equal(got, want) {
		t.Errorf("objects:\n got %v\nwant %v", got, want)
	}
	// Wave 0 is left out, as the Rust side writes it.
	if first := string(a.body[:strings.Index(string(a.body), `"source"`)]); strings.Contains(first, `"wave"`) {
		t.Errorf("wave 0 written: %s", first)
	}
	if response.Notes != "metrics is installed in monitoring.\n" {
		t.Errorf("notes %q", response.Notes)
	}
	if !slices.Equal(response.Warnings, []string{"chart mychart 1.2.3 is deprecated"}) {
		t.Errorf("warnings %q", response.Warnings)
	}
	byName := map[string]map[string]any{}
	for _, o := range response.Objects {
		byName[o.Object["metadata"].(map[string]any)["name"].(string)] = o.Object
	}
	if replicas := byName["metrics-mychart"]["spec"].(map[string]any)["replicas"]; replicas != json.Number("3") {
		t.Errorf("replicas %v: the configuration does not override the default", replicas)
	}
	data := byName["metrics-mychart-config"]["data"].(map[string]any)
	for key, value := range map[string]string{
		"greeting": "hello", "kubeVersion": "v1.34.1", "monitoring": "true", "lookup": "0",
		"namespace": "monitoring", "install": "true", "revision": "1",
	} {
		if data[key] != value {
			t.Errorf("data.%s = %v, want %q", key, data[key], value)
		}
	}
	if color := byName["metrics-sub"]["data"].(map[string]any)["color"]; color != "green" {
		t.Errorf("sub-chart color %v", color)
	}
	annotations := byName["migrate"]["metadata"].(map[string]any)["annotations"].(map[string]any)
	if annotations["helm.sh/hook"] != "pre-install,pre-upgrade" || annotations["helm.sh/hook-weight"] != "5" {
		t.Errorf("hook annotations %v", annotations)
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	ts, _ := newTestServer(t, newFakeReviewer(), 8<<20)
	body := renderRequestFor(t, chartArchiveOf(t, "mychart", testChart()), map[string]any{"greeting": "hi"})
	first := call(t, ts, http.MethodPost, "/gantry.dev/v1/render", goodToken, body)
	second := call(t, ts, http.MethodPost, "/gantry.dev/v1/render", goodToken, body)
	if first.status != http.StatusOK || !bytes.Equal(first.body, second.body) {
		t.Errorf("two renders differ (%d):\n%s\n%s", first.status, first.body, second.body)
	}
}

func TestTemplateErrors(t *testing.T) {
	ts, _ := newTestServer(t, newFakeReviewer(), 8<<20)
	for _, c := range []struct {
		name, file, template string
		wantFile             string
		wantLine             int
	}{
		{"parse", "templates/bad.yaml", "a: 1\nb: 2\nc: {{ .Values.x | nosuchfunc }}\n", "templates/bad.yaml", 3},
		{"execution", "templates/bad.yaml", "a: 1\n  {{ fail \"boom\" }}\n", "templates/bad.yaml", 2},
		{"sub-chart", "charts/sub/templates/bad.yaml", "x: {{ required \"color is required\" .Values.nothing }}\n",
			"charts/sub/templates/bad.yaml", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := testChart()
			files[c.file] = c.template
			a := call(t, ts, http.MethodPost, "/gantry.dev/v1/render", goodToken,
				renderRequestFor(t, chartArchiveOf(t, "mychart", files), map[string]any{}))
			e := theError(t, a, http.StatusUnprocessableEntity)
			if e.File != c.wantFile || e.Line != c.wantLine || e.Retryable {
				t.Errorf("%+v, want %s:%d", e, c.wantFile, c.wantLine)
			}
		})
	}
}

func TestInvalidInput(t *testing.T) {
	ts, _ := newTestServer(t, newFakeReviewer(), 8<<20)
	good := chartArchiveOf(t, "mychart", testChart())
	with := func(files map[string]string) []byte {
		chart := testChart()
		maps.Copy(chart, files)
		return renderRequestFor(t, chartArchiveOf(t, "mychart", chart), map[string]any{})
	}
	edit := func(change func(map[string]any)) []byte {
		var request map[string]any
		if err := json.Unmarshal(renderRequestFor(t, good, map[string]any{}), &request); err != nil {
			t.Fatal(err)
		}
		change(request)
		data, _ := json.Marshal(request)
		return data
	}
	layer := func(r map[string]any) map[string]any {
		return r["content"].(map[string]any)["layers"].([]any)[0].(map[string]any)
	}
	for _, c := range []struct {
		name     string
		body     []byte
		contains string
		file     string
		line     int
	}{
		{"malformed JSON", []byte(`{"contract":`), "not a render request", "", 0},
		{"unknown field", edit(func(r map[string]any) { r["extra"] = 1 }), "unknown field", "", 0},
		{"bad base64", edit(func(r map[string]any) { layer(r)["data"] = "%%% not base64" }), "not base64", "", 0},
		{"no chart layer", edit(func(r map[string]any) { layer(r)["mediaType"] = "application/octet-stream" }),
			"no layer of media type " + helmChartLayer, "", 0},
		{"no layers", edit(func(r map[string]any) { r["content"].(map[string]any)["layers"] = []any{} }),
			"no layer of media type", "", 0},
		{"other content", edit(func(r map[string]any) {
			r["content"].(map[string]any)["mediaType"] = "application/vnd.oci.image.config.v1+json"
		}), "is not a Helm chart", "", 0},
		{"not a chart", edit(func(r map[string]any) {
			layer(r)["data"] = base64.StdEncoding.EncodeToString([]byte("plain text"))
		}), "cannot be loaded", "", 0},
		{"schema", renderRequestFor(t, good, map[string]any{"replicaCount": "three"}), "schema", "", 0},
		{"invalid YAML", with(map[string]string{"templates/broken.yaml": "# header\n---\nkind: x\n  bad: [\n"}),
			"templates/broken.yaml", "templates/broken.yaml", 4},
		{"no name", with(map[string]string{"templates/anonymous.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: x-\n"}),
			"no metadata.name", "templates/anonymous.yaml", 1},
		{"missing dependency", with(map[string]string{"Chart.yaml": "apiVersion: v2\nname: mychart\nversion: 1.0.0\ndependencies:\n  - name: absent\n    version: 1.0.0\n"}),
			"missing in charts/ directory: absent", "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := theError(t, call(t, ts, http.MethodPost, "/gantry.dev/v1/render", goodToken, c.body), http.StatusUnprocessableEntity)
			if !strings.Contains(e.Message, c.contains) || e.File != c.file || e.Line != c.line || e.Retryable {
				t.Errorf("%+v, want a message with %q at %s:%d", e, c.contains, c.file, c.line)
			}
		})
	}
}

func TestTokens(t *testing.T) {
	reviewer := newFakeReviewer()
	ts, _ := newTestServer(t, reviewer, 1<<20)
	for _, token := range []string{"", "unknown", "other-user", "other-audience"} {
		e := theError(t, call(t, ts, http.MethodGet, "/gantry.dev/v1/identity", token, nil), http.StatusUnauthorized)
		if e.Retryable {
			t.Errorf("%q: %+v", token, e)
		}
	}
	// Unknown paths are refused too before anything is said about them.
	theError(t, call(t, ts, http.MethodGet, "/gantry.dev/v1/nothing", "unknown", nil), http.StatusUnauthorized)

	// A positive review is cached.
	before := reviewer.calls
	for range 3 {
		if a := call(t, ts, http.MethodGet, "/gantry.dev/v1/probe", goodToken, nil); a.status != http.StatusOK {
			t.Fatalf("%d %s", a.status, a.body)
		}
	}
	if reviewer.calls != before+1 {
		t.Errorf("%d reviews for three calls with one token", reviewer.calls-before)
	}

	// A review that could not be made is no refusal: 503, retryable.
	failing := &fakeReviewer{err: errors.New("connection refused")}
	ts2, _ := newTestServer(t, failing, 1<<20)
	if e := theError(t, call(t, ts2, http.MethodGet, "/gantry.dev/v1/probe", goodToken, nil), http.StatusServiceUnavailable); !e.Retryable {
		t.Errorf("%+v", e)
	}
}

func TestReviewCacheExpires(t *testing.T) {
	reviewer := newFakeReviewer()
	a := newAuthenticator(reviewer, defaultAudience, defaultAllowedUser)
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	check := func(token string) string {
		refusal, err := a.check(context.Background(), token)
		if err != nil {
			t.Fatal(err)
		}
		return refusal
	}
	check(goodToken)
	check("unknown")
	now = now.Add(negativeTTL - time.Second)
	if check(goodToken) != "" || check("unknown") == "" || reviewer.calls != 2 {
		t.Fatalf("%d reviews", reviewer.calls)
	}
	now = now.Add(2 * time.Second) // the refusal has expired, the acceptance not yet
	check(goodToken)
	check("unknown")
	if reviewer.calls != 3 {
		t.Errorf("%d reviews, want 3", reviewer.calls)
	}
	now = now.Add(positiveTTL)
	check(goodToken)
	if reviewer.calls != 4 {
		t.Errorf("%d reviews, want 4: a positive review is kept at most a minute", reviewer.calls)
	}
}

func TestOversizedRequest(t *testing.T) {
	ts, _ := newTestServer(t, newFakeReviewer(), 1024)
	body := renderRequestFor(t, bytes.Repeat([]byte{1}, 2048), map[string]any{})
	theError(t, call(t, ts, http.MethodPost, "/gantry.dev/v1/render", goodToken, body), http.StatusRequestEntityTooLarge)

	// Without a Content-Length the limit holds while reading.
	request, _ := http.NewRequest(http.MethodPost, ts.URL+"/gantry.dev/v1/render", io.MultiReader(bytes.NewReader(body)))
	request.ContentLength = -1
	request.Header.Set("Authorization", "Bearer "+goodToken)
	response, err := ts.Client().Do(request)
	if err != nil {
		t.Fatal(err)
	}
	response.Body.Close()
	if response.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: %d", response.StatusCode)
	}
}

func TestInternalFailure(t *testing.T) {
	ts, s := newTestServer(t, newFakeReviewer(), 1<<20)
	s.render = func(context.Context, *renderRequest) (*renderResponse, error) {
		return nil, errors.New("out of disk")
	}
	body := renderRequestFor(t, []byte{}, map[string]any{})
	if e := theError(t, call(t, ts, http.MethodPost, "/gantry.dev/v1/render", goodToken, body), http.StatusServiceUnavailable); !e.Retryable {
		t.Errorf("%+v", e)
	}
}

func TestLocate(t *testing.T) {
	for message, want := range map[string]source{
		`template: metrics/templates/x.yaml:12:3: executing "x" at <.Values.a>: nil pointer`: {"templates/x.yaml", 12},
		`parse error at (metrics/charts/sub/templates/y.yaml:7): unexpected "}"`:             {"charts/sub/templates/y.yaml", 7},
		`YAML parse error on metrics/templates/z.yaml: error converting YAML to JSON`:        {"templates/z.yaml", 0},
		`something else entirely: 12`: {},
	} {
		e := locate(invalid("%s", message), "metrics")
		if (source{e.File, e.Line}) != want {
			t.Errorf("%q: %s:%d, want %v", message, e.File, e.Line, want)
		}
	}
}
