package study

import (
	"container/list"

	"github.com/k3go/k3/cache"
)

// ARC is Megiddo and Modha's Adaptive Replacement Cache (FAST 2003) as a
// cache.Policy: T1 (seen once recently) and T2 (seen at least twice) with
// ghost lists B1 and B2 steering the target size p of T1. Pinned slots are
// taken out of T1/T2 and put back at the MRU end when released.
type ARC struct {
	n, p      int
	t1, t2    *list.List // evictable slots (int)
	b1, b2    *list.List // ghost keys
	where     map[cache.Key]*list.Element
	inB       map[cache.Key]int // 1 or 2
	key       []cache.Key
	inT2      []bool
	elem      []*list.Element
	count1    int // |T1| including pinned
	count2    int
	pendingT2 bool
}

func NewARC() *ARC { return &ARC{} }

func (a *ARC) Reset(slots int) {
	*a = ARC{n: slots, t1: list.New(), t2: list.New(), b1: list.New(), b2: list.New(),
		where: map[cache.Key]*list.Element{}, inB: map[cache.Key]int{},
		key: make([]cache.Key, slots), inT2: make([]bool, slots), elem: make([]*list.Element, slots)}
}

func (a *ARC) Access(k cache.Key, slot int) {
	if slot >= 0 {
		if !a.inT2[slot] {
			a.inT2[slot] = true
			a.count1--
			a.count2++
			if e := a.elem[slot]; e != nil {
				a.t1.Remove(e)
				a.elem[slot] = a.t2.PushFront(slot)
			}
		} else if e := a.elem[slot]; e != nil {
			a.t2.MoveToFront(e)
		}
		return
	}
	a.pendingT2 = false
	switch a.inB[k] {
	case 1:
		d := 1
		if a.b2.Len() > a.b1.Len() {
			d = a.b2.Len() / a.b1.Len()
		}
		a.p = min(a.n, a.p+d)
		a.dropGhost(k)
		a.pendingT2 = true
	case 2:
		d := 1
		if a.b1.Len() > a.b2.Len() {
			d = a.b1.Len() / a.b2.Len()
		}
		a.p = max(0, a.p-d)
		a.dropGhost(k)
		a.pendingT2 = true
	default:
		// Keep |T1|+|B1| <= c and the directory <= 2c.
		if a.count1+a.b1.Len() >= a.n && a.b1.Len() > 0 {
			a.dropOldest(a.b1)
		} else if a.count1+a.count2+a.b1.Len()+a.b2.Len() >= 2*a.n && a.b2.Len() > 0 {
			a.dropOldest(a.b2)
		}
	}
}

func (a *ARC) dropGhost(k cache.Key) {
	e := a.where[k]
	if a.inB[k] == 1 {
		a.b1.Remove(e)
	} else {
		a.b2.Remove(e)
	}
	delete(a.where, k)
	delete(a.inB, k)
}

func (a *ARC) dropOldest(l *list.List) {
	e := l.Back()
	k := e.Value.(cache.Key)
	l.Remove(e)
	delete(a.where, k)
	delete(a.inB, k)
}

func (a *ARC) Insert(slot int, k cache.Key) {
	a.key[slot] = k
	a.inT2[slot] = a.pendingT2
	if a.pendingT2 {
		a.count2++
	} else {
		a.count1++
	}
	a.pendingT2 = false
}

func (a *ARC) Pin(slot int) {
	if e := a.elem[slot]; e != nil {
		if a.inT2[slot] {
			a.t2.Remove(e)
		} else {
			a.t1.Remove(e)
		}
		a.elem[slot] = nil
	}
}

func (a *ARC) Unpin(slot int) {
	if a.inT2[slot] {
		a.elem[slot] = a.t2.PushFront(slot)
	} else {
		a.elem[slot] = a.t1.PushFront(slot)
	}
}

func (a *ARC) Remove(slot int) {
	if a.inT2[slot] {
		a.count2--
	} else {
		a.count1--
	}
	a.inT2[slot] = false
}

// Victim is ARC's REPLACE: take from T1 when it exceeds its target p (or
// when T2 has nothing evictable), else from T2; the victim's key becomes a
// ghost in B1 or B2.
func (a *ARC) Victim() int {
	fromT1 := a.t1.Len() > 0 && (a.count1 > a.p || a.t2.Len() == 0)
	var l *list.List
	switch {
	case fromT1:
		l = a.t1
	case a.t2.Len() > 0:
		l = a.t2
	default:
		return -1
	}
	e := l.Back()
	slot := e.Value.(int)
	l.Remove(e)
	a.elem[slot] = nil
	k := a.key[slot]
	if fromT1 {
		a.count1--
		a.where[k] = a.b1.PushFront(k)
		a.inB[k] = 1
	} else {
		a.count2--
		a.where[k] = a.b2.PushFront(k)
		a.inB[k] = 2
	}
	a.inT2[slot] = false
	return slot
}
