package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// sseResult is the memory of the sidecar process with n SSE streams open
// through one site.
type sseResult struct {
	When        string  `json:"when"` // fresh (before any load) or after_load
	Site        string  `json:"site"`
	Streams     int     `json:"streams"`
	Opened      int     `json:"opened"`          // streams that received supervaizer.connected
	AtUpstream  int64   `json:"upstream_open"`   // streams the agent saw open
	RSSBeforeMi float64 `json:"rss_before_mib"`  // sidecar VmRSS before opening
	RSSMi       float64 `json:"rss_mib"`         // sidecar VmRSS with the streams open
	HWMMi       float64 `json:"rss_peak_mib"`    // sidecar VmHWM (peak RSS so far)
	AnonMi      float64 `json:"rss_anon_mib"`    // of rss_mib: heap, stacks (RssAnon)
	FileMi      float64 `json:"rss_file_mib"`    // of rss_mib: the binary's mapped pages (RssFile)
	PerStreamKi float64 `json:"per_stream_kib"`  // (rss - before) / opened
	OpenSeconds float64 `json:"seconds_to_open"` // time to open all streams
}

// sseStreams opens n GET /a2a/events streams through site with the read
// key and no workspace token (unfiltered), waits for supervaizer.connected
// on each, reads the sidecar's VmRSS, then closes them all.
// during, if not nil, runs while the streams are open (profiling).
func (e *env) sseStreams(ctx context.Context, site, when string, n int, during func()) (sseResult, error) {
	r := sseResult{When: when, Site: site, Streams: n}
	rss0, _ := procStatus(e.sidecar.pid())
	r.RSSBeforeMi = float64(rss0) / 1024
	addr := fmt.Sprintf("127.0.0.1:%d", e.ports[site])
	req := "GET /a2a/events HTTP/1.1\r\nHost: " + addr + "\r\nX-API-Key: " + benchReadKey +
		"\r\nAccept: text/event-stream\r\n\r\n"

	conns := make([]net.Conn, n)
	var mu sync.Mutex
	var firstErr error
	opened := 0
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := openStream(ctx, addr, req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			conns[i] = c
			opened++
		}(i)
	}
	wg.Wait()
	r.OpenSeconds = time.Since(start).Seconds()
	r.Opened = opened
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		// Wait until the agent saw them close, so the next phase starts clean.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if c, err := e.upstreamCount(); err == nil && c.EventsOpen == 0 {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	time.Sleep(time.Second) // let the sidecar settle (buffers, goroutines) before reading RSS
	if c, err := e.upstreamCount(); err == nil {
		r.AtUpstream = c.EventsOpen
	}
	m := procMem(e.sidecar.pid())
	rss := m.RSS
	r.RSSMi, r.HWMMi = float64(m.RSS)/1024, float64(m.HWM)/1024
	r.AnonMi, r.FileMi = float64(m.Anon)/1024, float64(m.File)/1024
	if opened > 0 {
		r.PerStreamKi = float64(rss-rss0) / float64(opened)
	}
	if during != nil {
		during()
	}
	if opened < n && firstErr != nil {
		return r, fmt.Errorf("%d of %d SSE streams opened; first error: %w", opened, n, firstErr)
	}
	return r, nil
}

func openStream(ctx context.Context, addr, req string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 512)
	status, err := br.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, err
	}
	if !strings.Contains(status, " 200 ") {
		c.Close()
		return nil, fmt.Errorf("SSE answer %q", strings.TrimSpace(status))
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			c.Close()
			return nil, err
		}
		if strings.Contains(line, "supervaizer.connected") {
			break
		}
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}
