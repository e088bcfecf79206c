package plan

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/engine/planner"
)

// maxRanks bounds --ranks: beyond it a rank holds a row or none of the
// narrowest matrices.
const maxRanks = 1024

// network is the cluster's network as k3 plan --ranks models it.
type network struct {
	// Latency is one round trip between rank 0 and a worker; GBps rank
	// 0's link, in GB/s.
	Latency time.Duration
	GBps    float64
}

// clusterReport is the projection of clusters: how it is modelled, and
// one row per (ranks, budget, batch).
type clusterReport struct {
	Projection     string       `json:"projection"`
	NetLatencySecs float64      `json:"net_latency_seconds"`
	NetGBps        float64      `json:"net_gbps"`
	Rows           []clusterRow `json:"rows"`
}

// rankRow is what one rank reads per pass: its streamed trunk and the
// halves of the union's experts its cache misses.
type rankRow struct {
	PinnedBytes       int64   `json:"pinned_trunk_bytes"`
	TrunkBytesPerPass int64   `json:"trunk_bytes_per_pass"`
	CacheSlots        int     `json:"cache_slots"`
	CacheUnits        int64   `json:"cache_units"`
	ExpertBytes       int64   `json:"expert_bytes"`
	ExpertHitRate     float64 `json:"expert_hit_rate"`
	BytesPerPass      int64   `json:"bytes_per_pass"`
	BytesPerToken     int64   `json:"bytes_per_token"`
}

// clusterRow is one (ranks, budget, batch) cell: each rank's reads, the
// gathers and their bytes, and the time per token. A pass is one token of
// every sequence of the batch.
type clusterRow struct {
	Ranks       int     `json:"ranks"`
	Budget      int64   `json:"budget_bytes"`
	Batch       int     `json:"batch"`
	Fits        bool    `json:"fits"`
	Why         string  `json:"why,omitempty"`
	ExpertUnion float64 `json:"expert_union_per_layer"`
	Rank0       rankRow `json:"rank0"`
	// Worker is rank 1, the largest of the other ranks' slices; absent
	// with one rank.
	Worker *rankRow `json:"worker,omitempty"`
	// The network side of a pass: its gathers, the bytes rank 0 sends
	// (every round's inputs to each worker) and receives (each worker's
	// rows), their mean per gather and the time of one.
	GathersPerPass    int     `json:"gathers_per_pass"`
	SentPerPass       int64   `json:"sent_bytes_per_pass"`
	ReceivedPerPass   int64   `json:"received_bytes_per_pass"`
	BytesPerGather    float64 `json:"bytes_per_gather"`
	SecondsPerGather  float64 `json:"seconds_per_gather"`
	NetSecondsPerPass float64 `json:"net_seconds_per_pass"`
	// SPerToken[i] is a pass's time at the i-th disk bandwidth: the
	// slowest rank's reads, then the gathers.
	SPerToken       []float64 `json:"s_per_token"`
	TokensPerSecond []float64 `json:"aggregate_tokens_per_s"`
}

// clusterModel says what the cluster projection is.
const clusterModel = "a projection, not a measurement: each rank's bytes per pass are its streamed trunk slice and its misses of the union's expert halves " +
	"(the same planner and union model as one process); the ranks read their own disks at once, so a pass takes the slowest rank's bytes / disk GB/s, " +
	"plus gathers × (latency + rank 0's link bytes per gather / network GB/s), the inputs sent and the rows received counted one after the other; " +
	"compute, and its overlap with reads and transfers, not modelled"

// projectClusters projects a cluster of every size in ranks at every
// budget and batch size, each rank with the budget and one disk of each
// bandwidth in bw.
func projectClusters(in *k3.Inspection, ranks []int, budgets []int64, batches []int, union func(int) float64, bw []float64, net network) (*clusterReport, error) {
	rep := &clusterReport{Projection: clusterModel, NetLatencySecs: net.Latency.Seconds(), NetGBps: net.GBps}
	moe := in.Config.MoELayers
	for _, n := range ranks {
		for _, budget := range budgets {
			for _, b := range batches {
				row := clusterRow{Ranks: n, Budget: budget, Batch: b, ExpertUnion: union(b)}
				cp, err := in.PlanCluster(budget, n, b)
				if err != nil {
					if errors.Is(err, k3.ErrBudget) {
						row.Why = err.Error()
						rep.Rows = append(rep.Rows, row)
						continue
					}
					return nil, err
				}
				row.Fits = true
				row.Rank0 = rankBytes(cp.Rank0, cp.Rank0Experts, moe, row.ExpertUnion, b)
				slowest := row.Rank0.BytesPerPass
				if cp.Worker != nil {
					w := rankBytes(cp.Worker, cp.WorkerExperts, moe, row.ExpertUnion, b)
					row.Worker = &w
					slowest = max(slowest, w.BytesPerPass)
				}
				pass := cp.DecodePass(b, row.ExpertUnion)
				row.GathersPerPass, row.SentPerPass, row.ReceivedPerPass = pass.Gathers, pass.SentBytes, pass.ReceivedBytes
				if g := pass.Gathers; g > 0 {
					row.BytesPerGather = float64(pass.SentBytes+pass.ReceivedBytes) / float64(g)
					row.SecondsPerGather = net.Latency.Seconds() + row.BytesPerGather/(net.GBps*1e9)
					row.NetSecondsPerPass = float64(g) * row.SecondsPerGather
				}
				for _, g := range bw {
					s := float64(slowest)/(g*1e9) + row.NetSecondsPerPass
					row.SPerToken = append(row.SPerToken, s)
					row.TokensPerSecond = append(row.TokensPerSecond, float64(b)/math.Max(s, 1e-9))
				}
				rep.Rows = append(rep.Rows, row)
			}
		}
	}
	return rep, nil
}

// rankBytes is one rank's reads per pass of batch rows.
func rankBytes(mp *k3.MemoryPlan, x k3.ExpertShare, moe int, union float64, batch int) rankRow {
	r := rankRow{PinnedBytes: mp.PinnedBytes, TrunkBytesPerPass: mp.TrunkBytesPerPass, CacheSlots: mp.CacheSlots,
		CacheUnits: x.Units, ExpertBytes: x.ExpertBytes}
	r.ExpertHitRate, r.BytesPerPass = passBytes(mp, x, moe, union)
	r.BytesPerToken = r.BytesPerPass / int64(batch)
	return r
}

// printClusters prints the cluster projection as a table.
func printClusters(w io.Writer, rep *clusterReport, bw []float64) {
	fmt.Fprintf(w, "\ncluster (--ranks): %s\n", rep.Projection)
	fmt.Fprintf(w, "network: %v per round trip, rank 0's link %g GB/s; a pass is one token of every sequence of the batch; GB/token is a rank's reads per pass / batch; worker is rank 1, the largest of the others\n",
		time.Duration(rep.NetLatencySecs*1e9), rep.NetGBps)
	fmt.Fprintf(w, "%5s %10s %6s %8s %8s %8s %11s %11s %8s %10s %10s %10s", "ranks", "budget", "batch", "union", "r0 hit", "wkr hit", "r0 GB/tok", "wkr GB/tok",
		"gathers", "kB/gather", "µs/gather", "net s/tok")
	for _, g := range bw {
		fmt.Fprintf(w, " %14s", fmt.Sprintf("s/tok@%gGB/s", g))
	}
	fmt.Fprintln(w)
	for _, r := range rep.Rows {
		if !r.Fits {
			fmt.Fprintf(w, "%5d %10s %6d   does not fit: %s\n", r.Ranks, planner.Human(r.Budget), r.Batch, r.Why)
			continue
		}
		hit, wkr := "-", "-"
		if r.Worker != nil {
			hit = fmt.Sprintf("%.1f%%", 100*r.Worker.ExpertHitRate)
			wkr = fmt.Sprintf("%.2f", float64(r.Worker.BytesPerToken)/1e9)
		}
		fmt.Fprintf(w, "%5d %10s %6d %8.1f %7.1f%% %8s %11.2f %11s %8d %10.1f %10.1f %10.3f", r.Ranks, planner.Human(r.Budget), r.Batch, r.ExpertUnion,
			100*r.Rank0.ExpertHitRate, hit, float64(r.Rank0.BytesPerToken)/1e9, wkr, r.GathersPerPass, r.BytesPerGather/1e3, r.SecondsPerGather*1e6, r.NetSecondsPerPass)
		for _, s := range r.SPerToken {
			fmt.Fprintf(w, " %14.3f", s)
		}
		fmt.Fprintln(w)
	}
}
