package nsqbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// discover polls nsqlookupd for nsqd nodes every LookupdPollInterval and
// keeps the set of discovered nodes equal to what it reports. OpenPublisher
// made the first poll.
func (p *Publisher) discover(client *http.Client) {
	defer p.wg.Done()
	for sleep(p.ctx, p.opts.LookupdPollInterval) {
		p.pollLookupd(client)
	}
}

// pollLookupd asks every nsqlookupd for its nodes. Nodes none of them
// reports any more are stopped (after the batch they are sending); if no
// nsqlookupd answers, the known nodes stay.
func (p *Publisher) pollLookupd(client *http.Client) {
	found := map[string]bool{}
	answered := false
	for _, addr := range p.opts.Lookupd {
		nodes, err := queryLookupd(p.ctx, client, addr)
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			p.lookupdErrors.Add(1)
			p.log.Warn("nsqbridge: querying nsqlookupd", "lookupd", addr, "err", err)
			continue
		}
		answered = true
		for _, n := range nodes {
			found[n] = true
		}
	}
	if !answered {
		return
	}
	p.nodesMu.Lock()
	defer p.nodesMu.Unlock()
	if p.ctx.Err() != nil {
		return // closing: start nothing new
	}
	for addr := range found {
		p.addNodeLocked(addr, false)
	}
	for addr, n := range p.nodes {
		if !n.static && !found[addr] {
			n.cancel()
			delete(p.nodes, addr)
		}
	}
}

// queryLookupd returns the TCP addresses of the nsqd nodes registered with
// the nsqlookupd at addr (its /nodes endpoint).
func queryLookupd(ctx context.Context, client *http.Client, addr string) ([]string, error) {
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	url = strings.TrimSuffix(url, "/") + "/nodes"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/vnd.nsq; version=1.0")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	type producer struct {
		BroadcastAddress string `json:"broadcast_address"`
		TCPPort          int    `json:"tcp_port"`
	}
	var body struct {
		Producers []producer `json:"producers"`
		// nsqlookupd before 1.0 wrapped its answer in "data".
		Data struct {
			Producers []producer `json:"producers"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	var out []string
	for _, pr := range append(body.Producers, body.Data.Producers...) {
		if pr.BroadcastAddress != "" && pr.TCPPort > 0 {
			out = append(out, net.JoinHostPort(pr.BroadcastAddress, strconv.Itoa(pr.TCPPort)))
		}
	}
	return out, nil
}
