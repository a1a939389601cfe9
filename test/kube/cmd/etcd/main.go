// Command etcd is a single-member etcd on loopback built from go.etcd.io/etcd/server/v3's
// embed package, the storage of the test API server in test/kube; nothing of it ships.
//
//	etcd -data-dir DIR -client-url http://127.0.0.1:PORT -peer-url http://127.0.0.1:PORT
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "the member's data directory (required)")
	clientURL := flag.String("client-url", "", "the client URL, http://127.0.0.1:PORT (required)")
	peerURL := flag.String("peer-url", "", "the peer URL, http://127.0.0.1:PORT (required)")
	flag.Parse()
	if *dataDir == "" || *clientURL == "" || *peerURL == "" {
		fmt.Fprintln(os.Stderr, "etcd: -data-dir, -client-url and -peer-url are required")
		os.Exit(2)
	}
	cu, err := url.Parse(*clientURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd: -client-url:", err)
		os.Exit(2)
	}
	pu, err := url.Parse(*peerURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd: -peer-url:", err)
		os.Exit(2)
	}
	cfg := embed.NewConfig()
	cfg.Dir = *dataDir
	cfg.Name = "test"
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.LogLevel = "error"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
	<-e.Server.ReadyNotify()
	fmt.Println("etcd ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	select {
	case <-sig:
		e.Close()
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		e.Close()
		os.Exit(1)
	}
}
