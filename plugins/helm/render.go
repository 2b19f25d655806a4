package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"sigs.k8s.io/yaml"

	"helm.sh/helm/v4/pkg/chart/common"
	commonutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	helmrelease "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
)

// Waves. Gantry applies waves in increasing order, each once the previous one is installed
// (and its Jobs complete), so Helm's install sequence maps onto them like this:
//
//   - wave 0: every object of the chart's crds/ files and of its sub-charts' (Helm installs
//     these before rendering anything; they are not templates).
//   - waves 1..n: pre-install hooks, one wave per distinct helm.sh/hook-weight, ascending;
//     within a wave ordered by name after Helm's kind order, as Helm runs them.
//   - the next wave: every ordinary object of the templates, in Helm's InstallOrder.
//   - the waves after it: post-install hooks, again one wave per distinct weight.
//
// Waves are numbered densely from 1: a group with no objects takes no number.
//
// Hooks. Helm's own sorter (releaseutil.SortManifests) recognises them. A hook with
// pre-install goes to the pre-install waves (once, even if it also names post-install); one
// with post-install but not pre-install to the post-install waves. Every other hook is
// skipped: test (and test-success) hooks, and pre/post-upgrade, -delete and -rollback hooks,
// since a Gantry install is neither; a hook naming an event Helm does not know is skipped
// whole, as Helm skips it. The helm.sh/hook* annotations stay on the objects as rendered.
const (
	crdWave  = 0
	maxWaves = 999
)

// templateLocation finds "<chart>/<path>:<line>" in Helm's error text, as in
// "template: metrics/templates/x.yaml:12:3: ..." or "parse error at (metrics/templates/x.yaml:12)".
var templateLocation = regexp.MustCompile(`([^\s:()"<>]+):([0-9]+)`)

// render renders a chart as `helm template` would for an install, with the release and cluster
// facts of the request, and sorts the objects into waves.
func render(ctx context.Context, req *renderRequest) (*renderResponse, error) {
	if req.Contract != contract {
		return nil, invalid("contract %q is not supported; this plugin speaks %q", req.Contract, contract)
	}
	if req.Content.MediaType != helmConfigType {
		return nil, invalid("content of media type %q is not a Helm chart; this plugin accepts %s", req.Content.MediaType, helmConfigType)
	}
	if req.Release.Name == "" || req.Release.Namespace == "" {
		return nil, invalid("release.name and release.namespace are required")
	}
	if req.Cluster.Version == "" {
		return nil, invalid("cluster.version is required")
	}
	archive, err := chartArchive(req.Content.Layers)
	if err != nil {
		return nil, err
	}
	ch, err := loadChart(archive)
	if err != nil {
		return nil, err
	}
	// The release name must be one Helm accepts (at most 53 characters), as `helm install`
	// checks it; the Bundle's name is the release name.
	if err := chartutil.ValidateReleaseName(req.Release.Name); err != nil {
		return nil, invalid("release name %q: %v", req.Release.Name, err)
	}

	// The configuration plays the part of the user's values files. Numbers are float64, as
	// Helm reads values files.
	values := req.Config
	if values == nil {
		values = map[string]any{}
	}
	// Sub-charts disabled by conditions or tags are dropped here, and import-values applied.
	if err := chartutil.ProcessDependencies(ch, values); err != nil {
		return nil, invalid("chart dependencies processing failed: %v", err)
	}

	// .Capabilities: Helm's defaults (as `helm template` has them) with the cluster's version
	// and API versions, as `helm template --kube-version ... --api-versions ...` gives.
	kubeVersion, err := common.ParseKubeVersion(req.Cluster.Version)
	if err != nil {
		return nil, invalid("cluster.version %q: %v", req.Cluster.Version, err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kubeVersion
	caps.APIVersions = slices.Concat(caps.APIVersions, common.VersionSet(req.Cluster.APIVersions))

	options := common.ReleaseOptions{
		Name:      req.Release.Name,
		Namespace: req.Release.Namespace,
		Revision:  1,
		IsInstall: true,
	}
	// Coalesces the configuration with the chart's (and sub-charts') defaults and validates
	// the result against values.schema.json files, as helm does.
	top, err := commonutil.ToRenderValuesWithSchemaValidation(ch, values, options, caps, false)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if ch.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, invalid("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", ch.Metadata.KubeVersion, caps.KubeVersion.Version)
	}

	// An engine without a client is `helm template`'s: lookup returns empty results, and
	// DNS lookups are off.
	var e engine.Engine
	files, err := e.RenderWithContext(ctx, ch, top)
	if err != nil {
		return nil, locate(invalid("%v", err), ch.Name())
	}

	answer := &renderResponse{Objects: []renderedObject{}}
	if ch.Metadata.Deprecated {
		answer.Warnings = append(answer.Warnings, fmt.Sprintf("chart %s %s is deprecated", ch.Name(), ch.Metadata.Version))
	}
	// Only the top chart's NOTES.txt is shown, as by helm without --render-subchart-notes;
	// every NOTES.txt is removed from the objects.
	topNotes := path.Join(ch.Name(), "templates", "NOTES.txt")
	for name, text := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			if name == topNotes && strings.TrimSpace(text) != "" {
				answer.Notes = text
			}
			delete(files, name)
		}
	}
	const maxNotes = 65536
	if len(answer.Notes) > maxNotes {
		answer.Notes = truncate(answer.Notes, maxNotes)
		answer.Warnings = append(answer.Warnings, fmt.Sprintf("NOTES.txt was cut to %d bytes", maxNotes))
	}

	// Every document of every rendered template, parsed here first, so that an error names
	// the file and line; Helm's sorter then says which are hooks.
	documents := map[documentKey][]document{}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		docs, err := parseDocuments(files[name], relative(name, ch.Name()))
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			key := documentKey{name, d.text}
			documents[key] = append(documents[key], d)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, locate(invalid("%v", err), ch.Name())
	}
	// take returns the parsed document SortManifests found as (name, text): equal documents
	// of one file are taken in file order.
	take := func(name, text string) document {
		key := documentKey{name, text}
		d := documents[key][0]
		documents[key] = documents[key][1:]
		return d
	}

	var preInstall, postInstall []*helmrelease.Hook
	hookDocuments := map[*helmrelease.Hook]document{}
	for _, h := range hooks {
		hookDocuments[h] = take(h.Path, h.Manifest)
		switch {
		case slices.Contains(h.Events, helmrelease.HookPreInstall):
			preInstall = append(preInstall, h)
		case slices.Contains(h.Events, helmrelease.HookPostInstall):
			postInstall = append(postInstall, h)
		}
	}

	for _, crd := range ch.CRDObjects() {
		docs, err := parseDocuments(string(crd.File.Data), relative(crd.Filename, ch.Name()))
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			answer.add(d, crdWave)
		}
	}
	wave := crdWave + 1
	hookWaves := func(hs []*helmrelease.Hook) {
		// Helm runs the hooks of one event by weight, then name (a stable sort after its kind
		// order); each weight becomes a wave of its own.
		sort.SliceStable(hs, func(i, j int) bool {
			if hs[i].Weight != hs[j].Weight {
				return hs[i].Weight < hs[j].Weight
			}
			return hs[i].Name < hs[j].Name
		})
		for i, h := range hs {
			if i > 0 && h.Weight != hs[i-1].Weight {
				wave++
			}
			answer.add(hookDocuments[h], wave)
		}
		if len(hs) > 0 {
			wave++
		}
	}
	hookWaves(preInstall)
	before := len(answer.Objects)
	for _, m := range manifests {
		answer.add(take(m.Name, m.Content), wave)
	}
	// Documents with only comments are manifests to Helm too, but hold no object.
	if len(answer.Objects) > before {
		wave++
	}
	hookWaves(postInstall)
	if wave-1 > maxWaves {
		return nil, invalid("the chart needs %d waves; at most %d are possible", wave-1, maxWaves)
	}
	return answer, nil
}

// chartArchive returns the bytes of the content's one chart layer.
func chartArchive(layers []layer) ([]byte, error) {
	var found []layer
	for _, l := range layers {
		if l.MediaType == helmChartLayer {
			found = append(found, l)
		}
	}
	switch len(found) {
	case 0:
		return nil, invalid("the content has no layer of media type %s (the chart archive)", helmChartLayer)
	case 1:
	default:
		return nil, invalid("the content has %d layers of media type %s; a chart has one", len(found), helmChartLayer)
	}
	data, err := base64.StdEncoding.DecodeString(found[0].Data)
	if err != nil {
		return nil, invalid("the chart layer %s is not base64: %v", found[0].Digest, err)
	}
	return data, nil
}

// loadChart loads a chart archive from memory with Helm's loader and checks what `helm
// install` checks before rendering.
func loadChart(archive []byte) (*chart.Chart, error) {
	loaded, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return nil, invalid("the chart cannot be loaded: %v", err)
	}
	// Helm 4 installs charts of apiVersion v1 and v2 only; v3 is still experimental there.
	ch, ok := loaded.(*chart.Chart)
	if !ok || ch.Metadata == nil {
		return nil, invalid("the chart's apiVersion is not supported: only v1 and v2 charts are installable")
	}
	switch ch.Metadata.Type {
	case "", "application":
	default:
		return nil, invalid("%s charts are not installable", ch.Metadata.Type)
	}
	// As helm does (without --dependency-update): every dependency Chart.yaml names must be
	// in charts/.
	var missing []string
	for _, dep := range ch.Metadata.Dependencies {
		if !slices.ContainsFunc(ch.Dependencies(), func(c *chart.Chart) bool { return c.Name() == dep.Name }) {
			missing = append(missing, dep.Name)
		}
	}
	if len(missing) > 0 {
		return nil, invalid("found in Chart.yaml, but missing in charts/ directory: %s", strings.Join(missing, ", "))
	}
	return ch, nil
}

// relative is a chart file's path inside the chart: "<chart>/templates/x.yaml" is
// "templates/x.yaml", "<chart>/charts/sub/templates/y.yaml" is "charts/sub/templates/y.yaml".
func relative(name, chartName string) string {
	return strings.TrimPrefix(name, chartName+"/")
}

// locate adds the chart file and line an error of Helm's names, if it names one.
func locate(e *callError, chartName string) *callError {
	prefix := chartName + "/"
	for _, m := range templateLocation.FindAllStringSubmatch(e.Message, -1) {
		if strings.HasPrefix(m[1], prefix) {
			e.File = relative(m[1], chartName)
			e.Line, _ = strconv.Atoi(m[2])
			return e
		}
	}
	// "YAML parse error on <chart>/templates/x.yaml: ..." names the file only.
	for field := range strings.FieldsSeq(e.Message) {
		if name := strings.TrimRight(field, ":)"); strings.HasPrefix(name, prefix) && len(name) > len(prefix) {
			e.File = relative(name, chartName)
			return e
		}
	}
	return e
}

type documentKey struct{ name, text string }

// document is one YAML document of a rendered template or a crds/ file: its text as Helm's
// SplitManifests cuts it, where it starts, and the objects in it.
type document struct {
	text    string
	source  source
	objects []map[string]any
}

// documentSeparator is SplitManifests' separator: "---" at the start of a line, and any
// spaces or tabs after it.
var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*`)

// parseDocuments splits text as releaseutil.SplitManifests does, remembering each document's
// first line, and reads every document. Empty documents (only comments, or null) hold no
// objects; a List is flattened into its items, as Helm's Kubernetes client does.
func parseDocuments(text, file string) ([]document, error) {
	trimmed := strings.TrimLeftFunc(text, unicode.IsSpace)
	offset := len(text) - len(trimmed)
	var docs []document
	cuts := documentSeparator.FindAllStringIndex(trimmed, -1)
	start := 0
	for i := 0; i <= len(cuts); i++ {
		end, next := len(trimmed), len(trimmed)
		if i < len(cuts) {
			end, next = cuts[i][0], cuts[i][1]
		}
		piece := trimmed[start:end]
		pieceStart := start
		start = next
		if strings.TrimSpace(piece) == "" {
			continue
		}
		body := strings.TrimLeftFunc(piece, unicode.IsSpace)
		at := offset + pieceStart + len(piece) - len(body)
		d := document{text: body, source: source{File: file, Line: 1 + strings.Count(text[:at], "\n")}}
		objects, err := readObjects(body, d.source)
		if err != nil {
			return nil, err
		}
		d.objects = objects
		docs = append(docs, d)
	}
	return docs, nil
}

// yamlLine finds the line a YAML error names, relative to the document.
var yamlLine = regexp.MustCompile(`line ([0-9]+)`)

// readObjects reads one document into the objects it holds, checking each has what Gantry
// requires of an object: apiVersion, kind and metadata.name.
func readObjects(text string, at source) ([]map[string]any, error) {
	fail := func(line int, format string, args ...any) error {
		e := invalid("%s:%d: "+format, append([]any{at.File, line}, args...)...)
		e.File, e.Line = at.File, line
		return e
	}
	raw, err := yaml.YAMLToJSON([]byte(text))
	if err != nil {
		line := at.Line
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			n, _ := strconv.Atoi(m[1])
			line += n - 1
		}
		return nil, fail(line, "the document starting at line %d is not valid YAML: %v", at.Line, err)
	}
	// Numbers are kept as written: a large integer must not come out as a float.
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.UseNumber()
	var value any
	if err := decoder.Decode(&value); err != nil {
		return nil, fail(at.Line, "not valid YAML: %v", err)
	}
	if value == nil {
		return nil, nil
	}
	object, ok := value.(map[string]any)
	if !ok {
		return nil, fail(at.Line, "the document is not an object")
	}
	if len(object) == 0 {
		return nil, nil
	}
	objects := []map[string]any{object}
	if kind, _ := object["kind"].(string); strings.HasSuffix(kind, "List") {
		if items, ok := object["items"].([]any); ok {
			objects = objects[:0]
			for _, item := range items {
				o, ok := item.(map[string]any)
				if !ok {
					return nil, fail(at.Line, "an item of the %s is not an object", kind)
				}
				objects = append(objects, o)
			}
		}
	}
	for _, o := range objects {
		metadata, _ := o["metadata"].(map[string]any)
		name, _ := metadata["name"].(string)
		apiVersion, _ := o["apiVersion"].(string)
		kind, _ := o["kind"].(string)
		switch {
		case apiVersion == "":
			return nil, fail(at.Line, "the object has no apiVersion")
		case kind == "":
			return nil, fail(at.Line, "the object has no kind")
		case name == "":
			return nil, fail(at.Line, "the %s has no metadata.name", kind)
		}
	}
	return objects, nil
}

func (r *renderResponse) add(d document, wave int) {
	for _, o := range d.objects {
		at := d.source
		r.Objects = append(r.Objects, renderedObject{Object: o, Source: &at, Wave: wave})
	}
}
