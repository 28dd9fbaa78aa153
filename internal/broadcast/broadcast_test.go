package broadcast

import "testing"

func TestNotifyWakesEveryWaiterOnce(t *testing.T) {
	var b Broadcast
	w1, w2 := b.Wait(), b.Wait()
	select {
	case <-w1:
		t.Fatal("woken before Notify")
	default:
	}
	b.Notify()
	<-w1
	<-w2
	w3 := b.Wait()
	select {
	case <-w3:
		t.Fatal("a wait after Notify is woken by the earlier Notify")
	default:
	}
	b.Notify()
	<-w3
}
