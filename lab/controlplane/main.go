// Command controlplane is the lab's Kubernetes control plane in one binary: the first argument
// names the component, the rest are that component's own flags.
//
//	controlplane etcd --data-dir DIR --listen-client URL --listen-peer URL --cert F --key F --ca F
//	controlplane kube-apiserver ...            (upstream k8s.io/kubernetes/cmd/kube-apiserver)
//	controlplane kube-controller-manager ...   (upstream k8s.io/kubernetes/cmd/kube-controller-manager)
//	controlplane kube-scheduler ...            (upstream k8s.io/kubernetes/cmd/kube-scheduler)
//	controlplane version
//
// The three Kubernetes commands are the upstream cobra commands, unchanged; linking them into one
// binary compiles and links their shared packages once. etcd is go.etcd.io/etcd/server/v3/embed
// at the version k8s.io/kubernetes pins, serving TLS with client-certificate authentication.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"
	_ "time/tzdata" // CronJob time zones, as upstream's kube-apiserver and controller-manager do

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/component-base/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: controlplane etcd|kube-apiserver|kube-controller-manager|kube-scheduler|version [flags]")
		os.Exit(2)
	}
	component, args := os.Args[1], os.Args[2:]
	os.Args = append([]string{component}, args...)
	switch component {
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "etcd":
		os.Exit(runEtcd(args))
	case "version":
		fmt.Println(version.Get().GitVersion)
	default:
		fmt.Fprintf(os.Stderr, "controlplane: unknown component %q\n", component)
		os.Exit(2)
	}
}

// runEtcd starts a single-member etcd that only TLS clients with a certificate of the given CA
// may use, and stops it on SIGTERM/SIGINT.
func runEtcd(args []string) int {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "data directory")
	client := fs.String("listen-client", "https://127.0.0.1:2379", "client URL")
	peer := fs.String("listen-peer", "http://127.0.0.1:2380", "peer URL (loopback, single member)")
	cert := fs.String("cert", "", "serving certificate")
	key := fs.String("key", "", "serving key")
	ca := fs.String("ca", "", "CA of the client certificates")
	quota := fs.Int64("quota-backend-bytes", 2<<30, "backend size quota")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dataDir == "" || *cert == "" || *key == "" || *ca == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir, --cert, --key and --ca are required")
		return 2
	}
	clientURL, err := url.Parse(*client)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: --listen-client: %v\n", err)
		return 2
	}
	peerURL, err := url.Parse(*peer)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: --listen-peer: %v\n", err)
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name = "lab"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ClientTLSInfo.CertFile = *cert
	cfg.ClientTLSInfo.KeyFile = *key
	cfg.ClientTLSInfo.TrustedCAFile = *ca
	cfg.ClientTLSInfo.ClientCertAuth = true
	cfg.QuotaBackendBytes = *quota
	cfg.LogLevel = "error"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintln(os.Stderr, "etcd: ready on", clientURL.String())
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "etcd: not ready within 60 s")
		return 1
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-stop:
		fmt.Fprintln(os.Stderr, "etcd: stopping on", sig)
		return 0
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		return 1
	}
}
