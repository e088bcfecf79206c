package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/platform/rss"
)

// metrics are the server's Prometheus metrics, in a registry of its own
// (not the global one), so that several servers in one process, as in
// tests, do not collide.
type metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.CounterVec   // by endpoint and status
	duration   *prometheus.HistogramVec // by endpoint
	prompt     prometheus.Counter
	generated  prometheus.Counter
	queued     prometheus.Gauge
	running    prometheus.Gauge
	passRows   prometheus.Histogram
	passTime   prometheus.Histogram
	rejected   prometheus.Counter
	cancelled  prometheus.Counter
	drafted    prometheus.Counter
	accepted   prometheus.Counter
	reqDrafts  *prometheus.HistogramVec // per request, by outcome
	handler    http.Handler
	modelStats *statsCollector
}

func newMetrics(m *k3.Model) *metrics {
	reg := prometheus.NewRegistry()
	x := &metrics{reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "k3_requests_total",
			Help: "HTTP requests answered, by endpoint (the route, or \"other\") and status code."}, []string{"endpoint", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "k3_request_duration_seconds",
			Help: "Time from a request's arrival to the end of its response, by endpoint.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"endpoint"}),
		prompt:    prometheus.NewCounter(prometheus.CounterOpts{Name: "k3_prompt_tokens_total", Help: "Prompt tokens of generation requests (a prompt shared by n choices counts once)."}),
		generated: prometheus.NewCounter(prometheus.CounterOpts{Name: "k3_generated_tokens_total", Help: "Tokens generated, every choice of every request."}),
		queued:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "k3_queue_depth", Help: "Generation requests waiting for session places."}),
		running:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "k3_running_sequences", Help: "Sequences generating now (a request with n choices runs n)."}),
		passRows: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "k3_pass_rows",
			Help: "Token rows per forward pass over the weights, summed over the sequences sharing it.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		passTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "k3_pass_seconds",
			Help: "Wall time of one forward pass over the weights.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		rejected:  prometheus.NewCounter(prometheus.CounterOpts{Name: "k3_requests_rejected_total", Help: "Generation requests refused with 429 because the queue was full."}),
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{Name: "k3_requests_cancelled_total", Help: "Generations stopped because their client went away or their deadline passed."}),
		drafted: prometheus.NewCounter(prometheus.CounterOpts{Name: "k3_draft_tokens_total",
			Help: "Drafted tokens verified by speculative decoding (rows beyond each sequence's pending token), every request's."}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{Name: "k3_draft_accepted_tokens_total",
			Help: "Drafted tokens accepted: tokens that cost no pass of their own, every request's."}),
		reqDrafts: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "k3_request_draft_tokens",
			Help: "Drafted tokens per generation request, verified (outcome=\"drafted\") and accepted (outcome=\"accepted\").", Buckets: prometheus.ExponentialBuckets(1, 4, 8)}, []string{"outcome"}),
		modelStats: &statsCollector{m: m},
	}
	reg.MustRegister(x.requests, x.duration, x.prompt, x.generated, x.queued, x.running, x.passRows, x.passTime, x.rejected, x.cancelled,
		x.drafted, x.accepted, x.reqDrafts,
		x.modelStats, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	x.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	return x
}

// observePass is the model's pass observer (Model.ObservePasses).
func (x *metrics) observePass(rows int, d time.Duration) {
	x.passRows.Observe(float64(rows))
	x.passTime.Observe(d.Seconds())
}

// speculation records one generation request's drafted and accepted
// tokens.
func (x *metrics) speculation(drafted, accepted int64) {
	x.drafted.Add(float64(drafted))
	x.accepted.Add(float64(accepted))
	x.reqDrafts.WithLabelValues("drafted").Observe(float64(drafted))
	x.reqDrafts.WithLabelValues("accepted").Observe(float64(accepted))
}

func (x *metrics) request(endpoint string, status int, d time.Duration) {
	x.requests.WithLabelValues(endpoint, strconv.Itoa(status)).Inc()
	x.duration.WithLabelValues(endpoint).Observe(d.Seconds())
}

// statsCollector reports the model's cumulative counters (Model.Stats),
// read once per scrape.
type statsCollector struct{ m *k3.Model }

var (
	descBytesRead = prometheus.NewDesc("k3_bytes_read_total", "Bytes read from the checkpoint after loading, by kind (trunk: the dense weights; experts: routed experts).", []string{"kind"}, nil)
	descCacheHits = prometheus.NewDesc("k3_expert_cache_hits_total", "Expert lookups served from the expert cache.", nil, nil)
	descCacheMiss = prometheus.NewDesc("k3_expert_cache_misses_total", "Expert lookups that read the checkpoint.", nil, nil)
	descHitRate   = prometheus.NewDesc("k3_expert_cache_hit_ratio", "Expert cache hits over lookups since loading (0 before any lookup).", nil, nil)
	descPasses    = prometheus.NewDesc("k3_passes_total", "Forward passes over the weights.", nil, nil)
	descRows      = prometheus.NewDesc("k3_rows_total", "Token rows carried by the forward passes.", nil, nil)
	descRSS       = prometheus.NewDesc("k3_resident_memory_bytes", "Resident set size of the process now.", nil, nil)
	descPeakRSS   = prometheus.NewDesc("k3_peak_resident_memory_bytes", "Peak resident set size of the process.", nil, nil)
	descBudget    = prometheus.NewDesc("k3_ram_budget_bytes", "The engine's RAM budget (0: no limit).", nil, nil)

	descPrefixHits    = prometheus.NewDesc("k3_prefix_cache_hits_total", "Prompts whose start the prefix cache restored.", nil, nil)
	descPrefixMisses  = prometheus.NewDesc("k3_prefix_cache_misses_total", "Prompts the prefix cache had nothing for.", nil, nil)
	descPrefixTokens  = prometheus.NewDesc("k3_prefix_cache_tokens_total", "Prompt tokens restored from the prefix cache instead of computed.", nil, nil)
	descPrefixSaves   = prometheus.NewDesc("k3_prefix_cache_saves_total", "States the prefix cache stored.", nil, nil)
	descPrefixEvicted = prometheus.NewDesc("k3_prefix_cache_evictions_total", "Prefix cache entries evicted to make room (RAM and disk).", nil, nil)
	descPrefixBad     = prometheus.NewDesc("k3_prefix_cache_damaged_total", "Damaged or foreign prefix cache entries removed.", nil, nil)
	descPrefixBytes   = prometheus.NewDesc("k3_prefix_cache_bytes", "Bytes the prefix cache holds now, by tier (ram, disk).", []string{"tier"}, nil)
	descPrefixSeconds = prometheus.NewDesc("k3_prefix_cache_seconds_total", "Time spent restoring states from the prefix cache and saving them, by operation (restore, save).", []string{"op"}, nil)
	descConstrained   = prometheus.NewDesc("k3_constrained_generations_total", "Generations constrained by a grammar (a JSON schema or JSON object response format, a forced tool call, strict tools).", nil, nil)
	descMaskedTokens  = prometheus.NewDesc("k3_masked_tokens_total", "Tokens chosen under a grammar's mask.", nil, nil)
	descMaskSeconds   = prometheus.NewDesc("k3_mask_seconds_total", "Time spent computing grammar masks.", nil, nil)

	descRanks         = prometheus.NewDesc("k3_cluster_ranks", "Ranks of the cluster the model runs over (1: one process).", nil, nil)
	descRanksUp       = prometheus.NewDesc("k3_cluster_ranks_up", "Ranks connected now (rank 0 included).", nil, nil)
	descGathers       = prometheus.NewDesc("k3_cluster_gathers_total", "Rounds of products exchanged with the other ranks (each carries every row of a pass's group of products).", nil, nil)
	descGatherBytes   = prometheus.NewDesc("k3_cluster_gather_bytes_total", "Bytes of the rounds, by direction (sent: inputs to all workers; received: their rows).", []string{"direction"}, nil)
	descStateBytes    = prometheus.NewDesc("k3_cluster_state_bytes_total", "Bytes of sequences' KDA heads moved between rank 0 and the other ranks, both ways (saved, loaded or forked sessions; passes, speculation and prefix-cache saves and restores move none).", nil, nil)
	descGatherSeconds = prometheus.NewDesc("k3_cluster_gather_seconds_total", "Wall time of the rounds, and the part rank 0 waited for workers after its own rows (wait).", []string{"part"}, nil)
)

var allDescs = []*prometheus.Desc{descBytesRead, descCacheHits, descCacheMiss, descHitRate, descPasses, descRows, descRSS, descPeakRSS, descBudget,
	descPrefixHits, descPrefixMisses, descPrefixTokens, descPrefixSaves, descPrefixEvicted, descPrefixBad, descPrefixBytes, descPrefixSeconds,
	descConstrained, descMaskedTokens, descMaskSeconds, descRanks, descRanksUp, descGathers, descGatherBytes, descGatherSeconds, descStateBytes}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.Stats()
	ch <- prometheus.MustNewConstMetric(descBytesRead, prometheus.CounterValue, float64(st.TrunkBytesRead), "trunk")
	ch <- prometheus.MustNewConstMetric(descBytesRead, prometheus.CounterValue, float64(st.ExpertBytesRead), "experts")
	ch <- prometheus.MustNewConstMetric(descCacheHits, prometheus.CounterValue, float64(st.CacheHits))
	ch <- prometheus.MustNewConstMetric(descCacheMiss, prometheus.CounterValue, float64(st.CacheMisses))
	rate := 0.0
	if n := st.CacheHits + st.CacheMisses; n > 0 {
		rate = float64(st.CacheHits) / float64(n)
	}
	ch <- prometheus.MustNewConstMetric(descHitRate, prometheus.GaugeValue, rate)
	ch <- prometheus.MustNewConstMetric(descPasses, prometheus.CounterValue, float64(st.Passes))
	ch <- prometheus.MustNewConstMetric(descRows, prometheus.CounterValue, float64(st.Rows))
	ch <- prometheus.MustNewConstMetric(descRSS, prometheus.GaugeValue, float64(rss.Current()))
	ch <- prometheus.MustNewConstMetric(descPeakRSS, prometheus.GaugeValue, float64(st.PeakRSSBytes))
	ch <- prometheus.MustNewConstMetric(descBudget, prometheus.GaugeValue, float64(st.BudgetBytes))
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	counter(descPrefixHits, float64(st.PrefixHits))
	counter(descPrefixMisses, float64(st.PrefixMisses))
	counter(descPrefixTokens, float64(st.PrefixTokens))
	counter(descPrefixSaves, float64(st.PrefixSaves))
	counter(descPrefixEvicted, float64(st.PrefixEvictions))
	counter(descPrefixBad, float64(st.PrefixBad))
	ch <- prometheus.MustNewConstMetric(descPrefixBytes, prometheus.GaugeValue, float64(st.PrefixRAMBytes), "ram")
	ch <- prometheus.MustNewConstMetric(descPrefixBytes, prometheus.GaugeValue, float64(st.PrefixDiskBytes), "disk")
	counter(descPrefixSeconds, st.PrefixRestoreTime.Seconds(), "restore")
	counter(descPrefixSeconds, st.PrefixSaveTime.Seconds(), "save")
	counter(descConstrained, float64(st.ConstrainedGenerations))
	counter(descMaskedTokens, float64(st.MaskedTokens))
	counter(descMaskSeconds, st.MaskTime.Seconds())
	cs := c.m.Cluster()
	ch <- prometheus.MustNewConstMetric(descRanks, prometheus.GaugeValue, float64(cs.Ranks))
	ch <- prometheus.MustNewConstMetric(descRanksUp, prometheus.GaugeValue, float64(cs.Up))
	counter(descGathers, float64(cs.Rounds))
	counter(descGatherBytes, float64(cs.BytesSent), "sent")
	counter(descGatherBytes, float64(cs.BytesReceived), "received")
	counter(descGatherSeconds, cs.RoundTime.Seconds(), "round")
	counter(descGatherSeconds, cs.WaitTime.Seconds(), "wait")
	counter(descStateBytes, float64(cs.StateBytes))
}
