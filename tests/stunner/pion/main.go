// pion-ice: two pion/webrtc v4 PeerConnections in one process, connected through a TURN
// server (turngated in the tests), exchanging data-channel messages both ways and an RTP
// audio stream from A to B. Signalling is in process: A offers, B answers, each with all its
// candidates (no trickle).
//
// Peer A is always relay-only on the TURN URI given with -a (ICETransportPolicy relay: it
// gathers relay candidates only, so every packet it sends goes through the TURN server).
// Peer B is either relay-only too, on -b (symmetric ICE), or, with -b-host IP, has no ICE
// server at all and one host candidate: a UDP socket bound to IP (asymmetric ICE, IP plays a
// media server's pod address).
//
// The result is one JSON line on stdout (each side's selected pair, its gathered candidates,
// what arrived); the exit status is 0 when the data channel opened, -messages messages
// arrived in order each way and -rtp RTP packets reached B, all within -timeout; 1
// otherwise, with the reason in the JSON's "error" (and on stderr).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
)

type candidate struct {
	Type     string `json:"type"`
	Protocol string `json:"protocol"`
	Address  string `json:"address"`
	Port     uint16 `json:"port"`
	Related  string `json:"related,omitempty"`
}

type side struct {
	Local     *candidate `json:"local"`
	Remote    *candidate `json:"remote"`
	Gathered  []string   `json:"gathered"` // a=candidate lines of its local description
	Received  int        `json:"received"` // data-channel messages that arrived in order
	Connected bool       `json:"connected"`
}

type result struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	A     side   `json:"a"`
	B     side   `json:"b"`
	RTP   int    `json:"rtp"` // RTP packets B read from A's track
}

type peer struct {
	name string
	pc   *webrtc.PeerConnection
	mu   sync.Mutex
	got  int   // messages received in order
	bad  error // the first message out of order
	conn chan struct{}
}

func newPeer(name, url, user, pass, hostIP string) (*peer, error) {
	se := webrtc.SettingEngine{}
	se.SetIncludeLoopbackCandidate(true)
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	// Generous: a loaded test machine must not turn a slow check into a failure.
	se.SetICETimeouts(10*time.Second, 30*time.Second, 2*time.Second)
	cfg := webrtc.Configuration{}
	if hostIP != "" {
		// No ICE server; one host candidate on hostIP (a UDP mux bound there).
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(hostIP)})
		if err != nil {
			return nil, fmt.Errorf("peer %s: host socket on %s: %w", name, hostIP, err)
		}
		se.SetICEUDPMux(webrtc.NewICEUDPMux(nil, conn))
		se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	} else {
		cfg.ICEServers = []webrtc.ICEServer{{URLs: []string{url}, Username: user, Credential: pass}}
		cfg.ICETransportPolicy = webrtc.ICETransportPolicyRelay
	}
	me := &webrtc.MediaEngine{}
	if err := me.RegisterDefaultCodecs(); err != nil {
		return nil, err
	}
	api := webrtc.NewAPI(webrtc.WithSettingEngine(se), webrtc.WithMediaEngine(me))
	pc, err := api.NewPeerConnection(cfg)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", name, err)
	}
	p := &peer{name: name, pc: pc, conn: make(chan struct{})}
	var once sync.Once
	pc.OnICEConnectionStateChange(func(s webrtc.ICEConnectionState) {
		fmt.Fprintf(os.Stderr, "pion-ice: %s: ICE %s\n", name, s)
		if s == webrtc.ICEConnectionStateConnected {
			once.Do(func() { close(p.conn) })
		}
	})
	return p, nil
}

// gathered waits for ICE gathering to complete and returns the local description.
func (p *peer) setLocal(sdp webrtc.SessionDescription, deadline time.Time) (*webrtc.SessionDescription, error) {
	done := webrtc.GatheringCompletePromise(p.pc)
	if err := p.pc.SetLocalDescription(sdp); err != nil {
		return nil, fmt.Errorf("peer %s: SetLocalDescription: %w", p.name, err)
	}
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		return nil, fmt.Errorf("peer %s: ICE gathering did not complete", p.name)
	}
	return p.pc.LocalDescription(), nil
}

// wire makes ch count the other side's messages ("<other>-<i>", in order) and send this
// side's count messages once open.
func (p *peer) wire(ch *webrtc.DataChannel, other string, count int, done chan<- string) {
	ch.OnOpen(func() {
		for i := 0; i < count; i++ {
			if err := ch.SendText(fmt.Sprintf("%s-%d", p.name, i)); err != nil {
				fmt.Fprintf(os.Stderr, "pion-ice: %s: send %d: %v\n", p.name, i, err)
				return
			}
		}
	})
	ch.OnMessage(func(m webrtc.DataChannelMessage) {
		p.mu.Lock()
		defer p.mu.Unlock()
		want := fmt.Sprintf("%s-%d", other, p.got)
		if string(m.Data) != want {
			if p.bad == nil {
				p.bad = fmt.Errorf("peer %s: got %q, want %q", p.name, m.Data, want)
			}
			return
		}
		p.got++
		if p.got == count {
			done <- p.name
		}
	})
}

func pair(p *peer) (*candidate, *candidate) {
	sctp := p.pc.SCTP()
	if sctp == nil || sctp.Transport() == nil {
		return nil, nil
	}
	cp, err := sctp.Transport().ICETransport().GetSelectedCandidatePair()
	if err != nil || cp == nil {
		return nil, nil
	}
	conv := func(c *webrtc.ICECandidate) *candidate {
		return &candidate{Type: c.Typ.String(), Protocol: c.Protocol.String(), Address: c.Address,
			Port: c.Port, Related: c.RelatedAddress}
	}
	return conv(cp.Local), conv(cp.Remote)
}

func candidates(sdp *webrtc.SessionDescription) []string {
	out := []string{}
	if sdp == nil {
		return out
	}
	for _, l := range strings.Split(sdp.SDP, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "a=candidate:") {
			out = append(out, strings.TrimPrefix(l, "a="))
		}
	}
	return out
}

func run(res *result, closers *[]func()) error {
	aURL := flag.String("a", "", "peer A's TURN URI (turn:HOST:PORT?transport=udp|tcp)")
	aUser := flag.String("a-user", "", "peer A's TURN user name")
	aPass := flag.String("a-pass", "", "peer A's TURN password")
	bURL := flag.String("b", "", "peer B's TURN URI (symmetric ICE)")
	bUser := flag.String("b-user", "", "peer B's TURN user name")
	bPass := flag.String("b-pass", "", "peer B's TURN password")
	bHost := flag.String("b-host", "", "peer B's only host address, no ICE server (asymmetric ICE)")
	count := flag.Int("messages", 50, "data-channel messages each way")
	rtpWant := flag.Int("rtp", 50, "RTP packets B must receive from A")
	timeout := flag.Duration("timeout", 60*time.Second, "bound on the whole exchange")
	hold := flag.Bool("hold", false, "after the JSON line, keep both connections until stdin closes")
	flag.Parse()
	if *aURL == "" || (*bURL == "") == (*bHost == "") {
		return errors.New("usage: pion-ice -a URI -a-user U -a-pass P (-b URI -b-user U -b-pass P | -b-host IP)")
	}
	deadline := time.Now().Add(*timeout)

	a, err := newPeer("a", *aURL, *aUser, *aPass, "")
	if err != nil {
		return err
	}
	*closers = append(*closers, func() { a.pc.Close() })
	b, err := newPeer("b", *bURL, *bUser, *bPass, *bHost)
	if err != nil {
		return err
	}
	*closers = append(*closers, func() { b.pc.Close() })
	if *hold {
		*closers = append([]func(){func() { io.Copy(io.Discard, os.Stdin) }}, *closers...)
	}

	done := make(chan string, 2)
	dc, err := a.pc.CreateDataChannel("data", nil)
	if err != nil {
		return err
	}
	a.wire(dc, "b", *count, done)
	b.pc.OnDataChannel(func(ch *webrtc.DataChannel) { b.wire(ch, "a", *count, done) })

	track, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus},
		"audio", "pion-ice")
	if err != nil {
		return err
	}
	if _, err = a.pc.AddTrack(track); err != nil {
		return err
	}
	rtpDone := make(chan struct{})
	var rtpMu sync.Mutex
	rtpN := 0
	b.pc.OnTrack(func(t *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		for {
			if _, _, err := t.ReadRTP(); err != nil {
				return
			}
			rtpMu.Lock()
			rtpN++
			if rtpN == *rtpWant {
				close(rtpDone)
			}
			rtpMu.Unlock()
		}
	})

	offer, err := a.pc.CreateOffer(nil)
	if err != nil {
		return err
	}
	lo, err := a.setLocal(offer, deadline)
	if err != nil {
		return err
	}
	res.A.Gathered = candidates(lo)
	if err = b.pc.SetRemoteDescription(*lo); err != nil {
		return fmt.Errorf("peer b: SetRemoteDescription: %w", err)
	}
	answer, err := b.pc.CreateAnswer(nil)
	if err != nil {
		return err
	}
	la, err := b.setLocal(answer, deadline)
	if err != nil {
		return err
	}
	res.B.Gathered = candidates(la)
	if len(res.A.Gathered) == 0 {
		return errors.New("peer a gathered no candidate (no relay candidate from the TURN server)")
	}
	if err = a.pc.SetRemoteDescription(*la); err != nil {
		return fmt.Errorf("peer a: SetRemoteDescription: %w", err)
	}

	for _, p := range []*peer{a, b} {
		select {
		case <-p.conn:
		case <-time.After(time.Until(deadline)):
			return fmt.Errorf("peer %s: ICE did not connect (state %s)", p.name, p.pc.ICEConnectionState())
		}
	}
	res.A.Connected, res.B.Connected = true, true

	// RTP: A sends a 20 ms Opus-sized packet every 10 ms until B has read rtpWant of them (the
	// first may be lost while B's SRTP session comes up): bounded by the deadline.
	go func() {
		pkt := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SSRC: 0x7467},
			Payload: make([]byte, 160)}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; time.Now().Before(deadline); i++ {
			select {
			case <-rtpDone:
				return
			case <-tick.C:
			}
			pkt.SequenceNumber = uint16(i)
			pkt.Timestamp = uint32(i * 960)
			if err := track.WriteRTP(pkt); err != nil {
				return
			}
		}
	}()

	for n := 0; n < 2; n++ {
		select {
		case <-done:
		case <-time.After(time.Until(deadline)):
			n = 2
		}
	}
	if *rtpWant > 0 {
		select {
		case <-rtpDone:
		case <-time.After(time.Until(deadline)):
		}
	}
	for _, p := range []*peer{a, b} {
		s := &res.A
		if p == b {
			s = &res.B
		}
		s.Local, s.Remote = pair(p)
		p.mu.Lock()
		s.Received = p.got
		bad := p.bad
		p.mu.Unlock()
		if bad != nil {
			return bad
		}
	}
	rtpMu.Lock()
	gotRTP := rtpN
	rtpMu.Unlock()
	res.RTP = gotRTP
	switch {
	case res.A.Received < *count || res.B.Received < *count:
		return fmt.Errorf("data channel: a received %d, b received %d of %d", res.A.Received,
			res.B.Received, *count)
	case gotRTP < *rtpWant:
		return fmt.Errorf("RTP: b read %d of %d packets", gotRTP, *rtpWant)
	case res.A.Local == nil || res.B.Local == nil:
		return errors.New("no selected candidate pair")
	}
	return nil
}

func main() {
	res := &result{}
	var closers []func()
	err := run(res, &closers)
	if err != nil {
		res.Error = err.Error()
		fmt.Fprintln(os.Stderr, "pion-ice:", err)
	} else {
		res.OK = true
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	// With -hold: wait for stdin to close (the test reads the server's counters while
	// both sides are connected), then close A and B.
	for _, c := range closers {
		c()
	}
	if err != nil {
		os.Exit(1)
	}
}
